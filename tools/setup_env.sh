#!/usr/bin/env bash
# One environment step for both README commands (make demo, make test).
# Idempotent: a second run only checks the environment and returns in seconds.
#
# Routes, tried in order:
#   1. the active Python (PYTHON, default python3) already imports mpi4py and petsc4py
#      (a cluster module, conda): use them, install nothing system-wide;
#   2. Debian/Ubuntu as root: MPI, PETSc and petsc4py from the distribution;
#   3. otherwise: stop with the commands for the pip route.
# Either way the result is a virtual environment in $VENV that sees the MPI stack
# and holds numba, pytest, matplotlib and this package (editable).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
PYTHON=${PYTHON:-python3}
DEB_PACKAGES="python3-petsc4py python3-mpi4py python3-scipy libpetsc-real3.18-dev openmpi-bin pkg-config"
stamp="$VENV/.pipekrylov-env"
inputs=$(cat tools/setup_env.sh pyproject.toml | sha256sum | cut -c1-16)

say() { echo "setup_env: $*"; }

# --slurm: only the single-node Slurm that the batch-script test starts (make test).
if [ "${1:-}" = "--slurm" ]; then
    SLURM_PACKAGES="slurm-wlm munge"
    if command -v slurmctld >/dev/null && command -v munged >/dev/null; then
        exit 0
    elif [ -f /etc/debian_version ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        say "installing $SLURM_PACKAGES (for the Slurm batch-script test)"
        export DEBIAN_FRONTEND=noninteractive
        apt-get install -y -qq --no-install-recommends $SLURM_PACKAGES >/dev/null 2>&1 ||
            { apt-get update -qq && apt-get install -y -qq --no-install-recommends $SLURM_PACKAGES >/dev/null; }
    else
        say "no Slurm here and not Debian as root: the Slurm batch-script test will be skipped"
    fi
    exit 0
fi

venv_ready() {
    [ -x "$VENV/bin/python" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$inputs" ] &&
        "$VENV/bin/python" -c "import mpi4py, petsc4py, numba, scipy, pytest, matplotlib, pipekrylov" 2>/dev/null &&
        command -v mpiexec >/dev/null
}

if venv_ready; then
    say "environment in $VENV is ready"
    exit 0
fi

if "$PYTHON" -c "import mpi4py, petsc4py" 2>/dev/null && command -v mpiexec >/dev/null; then
    base_python=$(command -v "$PYTHON")
    say "using the MPI stack already importable in $base_python"
elif [ -f /etc/debian_version ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    if [ "$(dpkg-query -W -f='${db:Status-Status} ' $DEB_PACKAGES 2>/dev/null)" = "$(printf 'installed %.0s' $DEB_PACKAGES)" ]; then
        say "distribution packages already installed"
    else
        say "installing $DEB_PACKAGES (about a minute)"
        export DEBIAN_FRONTEND=noninteractive
        # A new machine's package lists may be empty: update first, then install.
        apt-get update -qq
        apt-get install -y -qq --no-install-recommends $DEB_PACKAGES >/dev/null
    fi
    base_python=/usr/bin/python3
else
    cat >&2 <<'MSG'
setup_env: no MPI/PETSc stack found, and this is not a Debian/Ubuntu machine where we are root.
Either load your site's MPI and PETSc (module load ..., conda activate ...) so that
    python3 -c "import mpi4py, petsc4py"
works and mpiexec is on PATH, then run make again; or take the pip route (PETSc builds from
source, which takes 20 minutes or more):
    python3 -m venv .venv && . .venv/bin/activate
    pip install mpich mpi4py            # MPICH wheel, then mpi4py built against it
    pip install petsc petsc4py          # builds PETSc from source
    pip install 'numba' pytest matplotlib scipy -e .
and run make again with PYTHON=.venv/bin/python.
MSG
    exit 1
fi

if [ ! -x "$VENV/bin/python" ]; then
    say "creating $VENV from $base_python (it sees the system's mpi4py, petsc4py, numpy, scipy)"
    "$base_python" -m venv --system-site-packages "$VENV"
fi
# Pin numpy to the one petsc4py and scipy were built against; numba must fit it
# (numba >= 0.61 needs a newer numpy than Debian 12's 1.24).
numpy_version=$("$VENV/bin/python" -c "import numpy; print(numpy.__version__)")
constraints="$VENV/constraints.txt"
echo "numpy==$numpy_version" > "$constraints"
numba_req="numba"
"$VENV/bin/python" - <<PY && numba_req="numba<0.61"
import numpy, sys
sys.exit(0 if tuple(int(v) for v in numpy.__version__.split(".")[:2]) < (1, 25) else 1)
PY
say "installing $numba_req, pytest, matplotlib and pipekrylov (editable)"
"$VENV/bin/python" -m pip install -q -c "$constraints" "$numba_req" pytest matplotlib
"$VENV/bin/python" -m pip install -q --no-deps -e .
echo "$inputs" > "$stamp"
"$VENV/bin/python" -c "import mpi4py, petsc4py, numba, pipekrylov; print('setup_env: ready: numba', numba.__version__, 'mpi4py', mpi4py.__version__, 'petsc4py', petsc4py.__version__)"
