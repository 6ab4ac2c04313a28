#!/usr/bin/env bash
# The suite on the stack a cluster user brings from pip, without PETSc: numpy 2, current
# numba and scipy, mpi4py 4 on the mpich wheel, in a virtual environment taken through
# the README's pip route (make test with that environment active).
#   tools/pip_stack.sh [VENV] [make args...]      default VENV: ~/.cache/pipekrylov/pip-stack
# The venv is kept between runs (about 40 s to make); the package is installed editable
# from this checkout each time.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${1:-${XDG_CACHE_HOME:-$HOME/.cache}/pipekrylov/pip-stack}
shift || true
packages="mpich mpi4py numba scipy"
if ! "$venv/bin/python" -c "import mpi4py, numba, scipy, numpy; assert int(numpy.__version__.split('.')[0]) >= 2" 2>/dev/null ||
   "$venv/bin/python" -c "import petsc4py" 2>/dev/null; then
    echo "pip_stack: making $venv: pip install $packages"
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/python" -m pip install -q $packages
fi
"$venv/bin/python" -c "import numpy, numba, mpi4py; from mpi4py import MPI; print('pip_stack: numpy', numpy.__version__, 'numba', numba.__version__, 'mpi4py', mpi4py.__version__, 'on', MPI.Get_library_version().splitlines()[0])"
# Its compiled kernels are kept apart from the other stack's (another numba would evict
# them from a shared cache), and between runs.
exec env -u PYTHONPATH VIRTUAL_ENV="$venv" PIPEKRYLOV_CACHE_DIR="$venv/pipekrylov-cache" \
    NUMBA_CACHE_DIR="$venv/numba-cache" make test "$@"
