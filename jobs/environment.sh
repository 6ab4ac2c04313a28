# Sourced by the job scripts: the Python and launcher they run with, taken from the
# environment they are started from, never from a fixed path.
#   PY        the Python that imports pipekrylov and mpi4py (default: python3 on PATH)
#   LAUNCHER  the MPI launcher, a template with {ranks} (default: 'mpiexec -n {ranks}')
PY=${PY:-python3}
default_launcher='mpiexec -n {ranks}'   # (a "}" inside ${...:-...} would end it)
LAUNCHER=${LAUNCHER:-$default_launcher}
if ! "$PY" -c "import mpi4py, numba, pipekrylov" 2>/dev/null; then
    echo "$0: '$PY' does not import mpi4py, numba and pipekrylov: activate the environment" \
         "(e.g. . .venv/bin/activate after make env) or set PY=/path/to/python" >&2
    exit 2
fi
