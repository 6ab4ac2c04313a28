#!/usr/bin/env bash
# The strong-scaling study every batch script runs: one series of process counts, then
# the collected table, CSV, JSON and plot.  Called by jobs/slurm_scaling.sbatch and
# jobs/pbs_scaling.pbs inside their allocation, or directly on a workstation:
#   TASKS=2 jobs/scaling.sh
# Settings (environment): TASKS (ranks available; the series is 1, 2, 4, ... up to it),
# RANKS (explicit series), METHODS, PROBLEM, PC, RTOL, MAXITER, LATENCY, LAUNCHER
# (a template with {ranks}), RESULTS (output folder), PY (the Python to use; see
# jobs/environment.sh: by default the python3 and mpiexec on PATH).
set -euo pipefail
cd "$(dirname "$0")/.."
TASKS=${TASKS:-2}
source jobs/environment.sh
if [ -z "${RANKS:-}" ]; then
    RANKS=""; n=1
    while [ "$n" -le "$TASKS" ]; do RANKS="$RANKS $n"; n=$((n * 2)); done
fi
for n in $RANKS; do
    if [ "$n" -gt "$TASKS" ]; then
        echo "scaling.sh: $n ranks requested but only $TASKS tasks allocated" >&2
        exit 2
    fi
done
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export NUMBA_NUM_THREADS=${NUMBA_NUM_THREADS:-1}
extra=()
[ -n "${MAXITER:-}" ] && extra+=(--maxiter "$MAXITER")
exec "$PY" -m pipekrylov scaling run --ranks $RANKS --methods ${METHODS:-cg p-cg} \
    --problem "${PROBLEM:-poisson2d:1000}" --pc "${PC:-jacobi}" --rtol "${RTOL:-1e-8}" \
    --latency "${LATENCY:-0}" --launcher "$LAUNCHER" \
    --output "${RESULTS:-results/scaling}" --title "${TITLE:-strong scaling}" "${extra[@]}"
