#!/usr/bin/env bash
# The suite on the stack a cluster user brings from pip, without PETSc: numpy 2, current
# numba and scipy, mpi4py 4 on the mpich wheel, in a virtual environment taken through
# the README's pip route (make test with that environment active).
#   [PYTHON=python3.13] tools/pip_stack.sh [VENV] [make args...]
# PYTHON (default python3) is the interpreter the venv is made from.  Default VENV:
# ~/.cache/pipekrylov/pip-stack-X.Y, one per Python minor version, so that stacks on two
# Pythons (CI runs two) do not evict each other.  The venv is kept between runs (about
# 40 s to make) and made again when it lacks the stack or was made from another Python;
# the package is installed editable from this checkout each time.
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
# Which Python a venv runs on: the installation under it and its exact version.
identity='import sys; print(sys.base_prefix, sys.version)'
want=$("$python" -c "$identity") || { echo "pip_stack: cannot run PYTHON=$python" >&2; exit 1; }
minor=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
venv=${1:-${XDG_CACHE_HOME:-$HOME/.cache}/pipekrylov/pip-stack-$minor}
shift || true
packages="mpich mpi4py numba scipy"
if [ "$("$venv/bin/python" -c "$identity" 2>/dev/null)" != "$want" ] ||
   ! "$venv/bin/python" -c "import mpi4py, numba, scipy, numpy; assert int(numpy.__version__.split('.')[0]) >= 2" 2>/dev/null ||
   "$venv/bin/python" -c "import petsc4py" 2>/dev/null; then
    echo "pip_stack: making $venv from $python (Python $minor): pip install $packages"
    rm -rf "$venv"
    "$python" -m venv "$venv"
    "$venv/bin/python" -m pip install -q $packages
fi
"$venv/bin/python" -c "import sys, numpy, numba, mpi4py, scipy; from mpi4py import MPI; print('pip_stack: Python', sys.version.split()[0], 'numpy', numpy.__version__, 'numba', numba.__version__, 'scipy', scipy.__version__, 'mpi4py', mpi4py.__version__, 'on', MPI.Get_library_version().splitlines()[0])"
# Its compiled kernels are kept apart from the other stacks' (another numba would evict
# them from a shared cache), and between runs.
exec env -u PYTHONPATH VIRTUAL_ENV="$venv" PIPEKRYLOV_CACHE_DIR="$venv/pipekrylov-cache" \
    NUMBA_CACHE_DIR="$venv/numba-cache" make test "$@"
