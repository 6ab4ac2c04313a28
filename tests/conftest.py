"""Test machinery for running one test body on every rank of COMM_WORLD.

`make test` runs pytest once serially (every test, MPI tests on one rank) and then under
``mpiexec -n 2`` and ``-n 4`` with ``-m mpi`` (only the tests marked ``@pytest.mark.mpi``).
Under mpiexec:

* only rank 0 prints; the other ranks write to /dev/null;
* after each test the ranks agree on its outcome: a failure on any rank fails the test on
  every rank, and rank 0 shows each distinct traceback once, naming the ranks;
* a rank that failed waits at most PIPEKRYLOV_AGREE_TIMEOUT seconds (default 60) for the
  others to reach the agreement (they may be stuck in a collective the failing rank never
  entered); then it prints its traceback and aborts the job;
* every test runs under a watchdog (PIPEKRYLOV_TEST_TIMEOUT seconds, default 300) that
  dumps the stacks and exits the rank, so a deadlock ends the job instead of hanging CI.
"""
import faulthandler
import json
import os
import sys
import time

import numpy as np
import pytest

try:
    from mpi4py import MPI
except ImportError:  # the serial tests that do not need MPI still run
    MPI = None

WORLD = MPI.COMM_WORLD if MPI is not None else None
SIZE = WORLD.Get_size() if WORLD is not None else 1
RANK = WORLD.Get_rank() if WORLD is not None else 0
TEST_TIMEOUT = float(os.environ.get("PIPEKRYLOV_TEST_TIMEOUT", "300"))
AGREE_TIMEOUT = float(os.environ.get("PIPEKRYLOV_AGREE_TIMEOUT", "60"))
# Outcomes are agreed on a communicator of their own, so the agreement can never be
# matched against a collective that a test left unfinished on COMM_WORLD.
_AGREE = WORLD.Dup() if SIZE > 1 else None


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    if RANK > 0 and not os.environ.get("PIPEKRYLOV_TEST_ALL_RANKS"):  # set it to debug
        sys.stdout = open(os.devnull, "w")


def pytest_collection_modifyitems(config, items):
    for item in items:
        marker = item.get_closest_marker("mpi")
        min_size = marker.kwargs.get("min_size", 1) if marker else 1
        if SIZE < min_size:
            item.add_marker(pytest.mark.skip(reason=f"needs at least {min_size} ranks"))


@pytest.fixture
def comm():
    """COMM_WORLD (of size 1 in the serial run).  The test is run by every rank."""
    if WORLD is None:
        pytest.skip("mpi4py is not installed")
    return WORLD


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    faulthandler.dump_traceback_later(TEST_TIMEOUT, exit=True)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    if _AGREE is None or call.when == "teardown":
        return
    report = outcome.get_result()
    failed = _agree_failed(report)
    if not failed:
        return
    crash = getattr(getattr(report.longrepr, "reprcrash", None), "message", report.longreprtext)
    failures = _AGREE.allgather((crash, report.longreprtext) if report.failed else None)
    by_crash = {}  # the same failure on several ranks is shown once
    for rank, failure in enumerate(failures):
        if failure is not None:
            by_crash.setdefault(failure[0], [failure[1], []])[1].append(rank)
    ranks = sorted(r for _, rs in by_crash.values() for r in rs)
    parts = [f"--- failed on rank(s) {', '.join(map(str, rs))} of {SIZE} ---\n{text}"
             for text, rs in by_crash.values()]
    report.outcome = "failed"
    report.longrepr = "\n".join(parts) if RANK == 0 else f"failed on ranks {ranks}"


def _agree_failed(report):
    """Allreduce 'did it fail' with a deadline for the ranks that failed."""

    mine = np.array([1 if report.failed else 0], dtype=np.int32)
    anyone = np.zeros(1, dtype=np.int32)
    request = _AGREE.Iallreduce(mine, anyone, op=MPI.MAX)
    deadline = time.monotonic() + AGREE_TIMEOUT
    while not request.Test():
        if report.failed and time.monotonic() > deadline:
            sys.stderr.write(
                f"\n[rank {RANK}] test failed here while other ranks did not finish it within "
                f"{AGREE_TIMEOUT:.0f} s (stuck in a collective?); aborting the job.\n"
                f"{report.longreprtext}\n")
            sys.stderr.flush()
            WORLD.Abort(1)
        time.sleep(0.001)
    return bool(anyone[0])


def pytest_sessionfinish(session, exitstatus):
    """Rank 0 leaves its counts for tools/run_tests.py, which sums the runs."""
    path = os.environ.get("PIPEKRYLOV_TEST_REPORT")
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if not path or RANK != 0 or reporter is None:
        return
    counts = {}
    for key in ("passed", "failed", "skipped", "error", "xfailed", "xpassed"):
        if reporter.stats.get(key):
            counts[key] = len(reporter.stats[key])
    with open(path, "w") as f:
        json.dump(counts, f)
