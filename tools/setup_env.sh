#!/usr/bin/env bash
# One environment step for both README commands (make demo, make test).
# Idempotent: a second run only checks the environment and returns in seconds.
#
# Routes, tried in order:
#   1. $VENV already holds a Python that imports mpi4py: the pip route (pip install mpich
#      mpi4py numba scipy in a venv of your own, activated or at .venv) or a conda
#      environment: complete it in place with what is missing, install nothing system-wide;
#   2. the active Python (PYTHON, default python3) imports mpi4py (a cluster module, a
#      system stack): a virtual environment in $VENV that sees it;
#   3. Debian/Ubuntu as root: MPI, PETSc and petsc4py from the distribution, and a virtual
#      environment in $VENV that sees them;
#   4. otherwise: stop with the commands for the pip route.
# petsc4py is optional on routes 1 and 2: without it the PETSc parts skip.  The result
# holds numba, pytest, matplotlib and this package (editable).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
PYTHON=${PYTHON:-python3}
DEB_PACKAGES="python3-petsc4py python3-mpi4py python3-scipy libpetsc-real3.18-dev openmpi-bin pkg-config"
stamp="$VENV/.pipekrylov-env"
# what the environment was made from, this checkout's path included (the editable install
# points at it: an environment kept between checkouts is completed again)
inputs=$( (cat tools/setup_env.sh pyproject.toml; pwd) | sha256sum | cut -c1-16)

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

# mpiexec beside the Python (the mpich wheel puts it there) or on PATH
has_mpiexec() { [ -x "$VENV/bin/mpiexec" ] || command -v mpiexec >/dev/null; }

venv_ready() {
    [ -x "$VENV/bin/python" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$inputs" ] &&
        "$VENV/bin/python" -c "import mpi4py, numba, scipy, pytest, matplotlib, pipekrylov" 2>/dev/null &&
        has_mpiexec
}

if venv_ready; then
    say "environment in $VENV is ready"
    exit 0
fi

if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c "import mpi4py" 2>/dev/null; then
    say "completing the Python environment in $VENV (it imports mpi4py)"
elif [ -x "$VENV/bin/python" ] && [ ! -f "$stamp" ]; then
    echo "setup_env: $VENV is a Python environment without mpi4py: install it there" \
         "(pip install mpich mpi4py), or deactivate it to let the setup make its own." >&2
    exit 1
else
    if "$PYTHON" -c "import mpi4py" 2>/dev/null && command -v mpiexec >/dev/null; then
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
setup_env: no MPI stack found, and this is not a Debian/Ubuntu machine where we are root.
Either load your site's MPI (module load ..., conda activate ...) so that
    python3 -c "import mpi4py"
works and mpiexec is on PATH, then run make again; or take the pip route (about 40 s):
    python3 -m venv .venv
    .venv/bin/pip install mpich mpi4py numba scipy
and run make again (petsc4py is optional: pip install petsc petsc4py builds PETSc from
source, 20 minutes or more).
MSG
        exit 1
    fi
    if [ ! -x "$VENV/bin/python" ]; then
        say "creating $VENV from $base_python (it sees that Python's mpi4py, numpy, scipy and petsc4py if any)"
        "$base_python" -m venv --system-site-packages "$VENV"
    fi
fi
# Pin numpy to the one mpi4py/petsc4py and scipy were built against; numba must fit it
# (numba >= 0.61 needs a newer numpy than Debian 12's 1.24).
numpy_version=$("$VENV/bin/python" -c "import numpy; print(numpy.__version__)" 2>/dev/null || true)
constraints="$VENV/constraints.txt"
: > "$constraints"
numba_req="numba"
if [ -n "$numpy_version" ]; then
    echo "numpy==$numpy_version" > "$constraints"
    "$VENV/bin/python" - <<PY && numba_req="numba<0.61"
import numpy, sys
sys.exit(0 if tuple(int(v) for v in numpy.__version__.split(".")[:2]) < (1, 25) else 1)
PY
fi
say "installing what is missing of $numba_req, scipy, pytest, matplotlib, and pipekrylov (editable)"
"$VENV/bin/python" -m pip install -q -c "$constraints" "$numba_req" scipy pytest matplotlib
"$VENV/bin/python" -m pip install -q --no-deps -e .
say "compiling the kernels of the common solves into the cache (45-100 s the first time)"
"$VENV/bin/python" -m pipekrylov warm
echo "$inputs" > "$stamp"
has_mpiexec || { echo "setup_env: mpi4py imports but no mpiexec beside it or on PATH" >&2; exit 1; }
"$VENV/bin/python" - <<'PY'
import mpi4py, numba, numpy, pipekrylov
try:
    import petsc4py
    petsc = "petsc4py " + petsc4py.__version__
except ImportError:
    petsc = "no petsc4py (the PETSc parts skip)"
from mpi4py import MPI
print(f"setup_env: ready: numpy {numpy.__version__}, numba {numba.__version__}, mpi4py {mpi4py.__version__} "
      f"on {MPI.Get_library_version().splitlines()[0].strip()}, {petsc}")
PY
