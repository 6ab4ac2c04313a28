"""Run the test suite: serially, then under mpiexec at each process count.

    python tools/run_tests.py [--sizes 2 4] [--no-serial] [--timeout SECONDS] [pytest args...]

The serial run takes every test; the MPI runs take the tests marked ``mpi``.  ``--sizes``
with no count makes the serial run alone, ``--no-serial`` the MPI runs alone (CI makes
them apart, to compile beside another stack's serial run).  Every
mpiexec run has a wall-clock timeout (a deadlock fails the run, it does not hang it), a
failure on any rank fails the run, and the last line printed is the combined pytest-style
summary of all runs.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def activated_environment():
    """This Python's environment as if activated: its bin/ first on PATH, so the tests'
    subprocesses (python3, mpiexec, the job scripts) use its stack, not another one on PATH
    (the mpich wheel puts mpiexec beside the interpreter)."""
    bindir = os.path.dirname(os.path.abspath(sys.executable))
    return dict(os.environ, PATH=os.pathsep.join([bindir, os.environ.get("PATH", "")]))


def mpi_environment():
    env = activated_environment()
    # Open MPI refuses root and more ranks than cores unless told; MPICH ignores these.
    env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
    env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    env.setdefault("OMPI_MCA_rmaps_base_oversubscribe", "1")
    # Oversubscribed ranks must not also spawn a thread per core each.
    for var in ("NUMBA_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env.setdefault(var, "1")
    return env


def run(label, command, env, timeout, report):
    print(f"\n==== {label}: {' '.join(command)}", flush=True)
    start = time.monotonic()
    env = dict(env, PIPEKRYLOV_TEST_REPORT=report)
    try:
        # A new session, so a timeout can kill mpiexec and every rank it started.
        proc = subprocess.Popen(command, env=env, cwd=ROOT, start_new_session=True)
        code = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        proc.wait()
        print(f"==== {label}: TIMEOUT after {timeout:.0f} s: killed (a deadlock?)", flush=True)
        return {"failed": 1, "timeout": 1}, 124
    counts = {}
    if os.path.exists(report):
        with open(report) as f:
            counts = json.load(f)
    elapsed = time.monotonic() - start
    print(f"==== {label}: exit {code} in {elapsed:.1f} s: {format_counts(counts)}", flush=True)
    if code not in (0, 5) and not counts.get("failed") and not counts.get("error"):
        counts["failed"] = counts.get("failed", 0) + 1  # a rank died outside any test
    return counts, code


def format_counts(counts):
    order = ["failed", "passed", "skipped", "xfailed", "xpassed", "error", "timeout"]
    parts = [f"{counts[k]} {k}" for k in order if counts.get(k)]
    return ", ".join(parts) or "no tests ran"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="*", default=[2, 4])
    # a guard against a deadlock, not a time budget: a first run on a slower or busier
    # machine compiles every kernel inside the serial run
    parser.add_argument("--timeout", type=float, default=2400,
                        help="wall-clock limit of each run (serial and each mpiexec), seconds")
    parser.add_argument("--no-serial", action="store_true", help="only the MPI runs")
    parser.add_argument("--mpiexec", default=os.environ.get("MPIEXEC", "mpiexec"))
    args, pytest_args = parser.parse_known_args()
    env = mpi_environment()
    mpiexec = shutil.which(args.mpiexec, path=env["PATH"])
    python = sys.executable
    total = {}
    worst = 0
    start = time.monotonic()
    # mpiexec hands rank 0 a terminal of its own: say explicitly whether ours is one.
    pytest_args = ["--color=" + ("yes" if sys.stdout.isatty() else "no"), *pytest_args]
    with tempfile.TemporaryDirectory() as tmp:
        runs = [] if args.no_serial else [("serial", [python, "-m", "pytest", "-q", *pytest_args],
                                           activated_environment())]
        for n in args.sizes:
            if mpiexec is None:
                print("mpiexec not found: cannot run the MPI tests", file=sys.stderr)
                return 2
            runs.append((f"mpi n={n}", [mpiexec, "-n", str(n), python, "-m", "pytest", "-q",
                                        "-m", "mpi", *pytest_args], env))
        for i, (label, command, run_env) in enumerate(runs):
            counts, code = run(label, command, run_env, args.timeout, os.path.join(tmp, f"{i}.json"))
            for k, v in counts.items():
                total[k] = total.get(k, 0) + v
            if code not in (0, 5):
                worst = worst or code
    elapsed = time.monotonic() - start
    summary = f"{format_counts(total)} in {elapsed:.2f}s"
    print(f"\n{'=' * 20} all runs: {summary} {'=' * 20}")
    if not total.get("passed"):
        worst = worst or 5
    return 1 if (worst or total.get("failed") or total.get("error")) else 0


if __name__ == "__main__":
    sys.exit(main())
