"""Helpers the benchmarks share (``from benchmarks.common import ...``): timing across
ranks, a STREAM triad kernel, cache flushing, table printing, mpiexec's environment."""
import os
import time

import numpy as np

from pipekrylov.kernels.compile import jit


@jit(["void(float64[::1], float64[::1], float64[::1], float64)"], fastmath=False)
def triad(a, b, c, s):
    for i in range(a.shape[0]):
        a[i] = b[i] + s * c[i]


def best_time(comm, func, repeat=20):
    """Best over ``repeat`` runs of the slowest rank's time (ranks start together)."""
    return best_times(comm, {"f": func}, repeat)["f"]


def best_times(comm, funcs, repeat=20, before=None):
    """Best times of several functions measured in interleaved rounds.

    Interleaving spreads the machine's noise over all candidates alike, so their ratios
    mean something on a shared, noisy machine.  ``before`` (untimed) runs before each
    call, e.g. ``CacheFlush`` to time from memory.
    """
    for func in funcs.values():
        func()
    best = {name: np.inf for name in funcs}
    for _ in range(repeat):
        for name, func in funcs.items():
            if before is not None:
                before()
            comm.Barrier()
            t0 = time.perf_counter()
            func()
            best[name] = min(best[name], comm.allreduce(time.perf_counter() - t0, op=max_op()))
    return best


def last_level_cache_bytes(default=32 << 20):
    """Size of the largest CPU cache (Linux sysfs), else ``default``."""
    import glob
    sizes = []
    for path in glob.glob("/sys/devices/system/cpu/cpu0/cache/index*/size"):
        with open(path) as f:
            text = f.read().strip()
        scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1], 1)
        sizes.append(int(text.rstrip("KMG")) * scale)
    return max(sizes, default=default)


class CacheFlush:
    """Reads a buffer of twice the last-level cache (shared by the ``ranks`` of a node),
    so that what runs next reads its data from memory, not from a cache that a previous
    call (or a smaller competitor) left warm.  Reads, not writes: dirty lines left in the
    cache would be written back during the next, timed call."""

    def __init__(self, ranks=1):
        self.buffer = np.ones(2 * last_level_cache_bytes() // 8 // ranks)  # written: real pages
        self.total = 0.0

    def __call__(self):
        self.total += float(self.buffer.sum())


def max_op():
    from mpi4py import MPI
    return MPI.MAX


def poisson_with_spmv_time(comm, n):
    """The latency benchmarks' problem: 2D Poisson n^2, b = A 1, and the SpMV time (best of
    20) that sets the injected latencies."""
    import pipekrylov as pk
    A = pk.poisson2d(comm, n)
    b = A.matvec(np.ones(A.partition.nlocal))
    y = np.empty_like(b)
    return A, b, best_time(comm, lambda: A.matvec(b, y), repeat=20)


def per_iteration(comm, solver, A, b, iterations, repeat, latencies=(0.0,), M="jacobi"):
    """Per injected latency: the best over ``repeat`` solves of exactly ``iterations``
    iterations (rtol 0) of the slowest rank's time per iteration, and its time blocked in
    reductions per iteration.  The latencies take turns within each repetition, so the
    machine's noise falls on all of them alike (their differences are what is reported)."""
    from mpi4py import MPI
    best = {L: (np.inf, np.nan) for L in latencies}
    for _ in range(repeat):
        for L in latencies:
            comm.Barrier()
            res = solver(A, b, rtol=0.0, maxiter=iterations, M=M, latency=L)
            t = comm.allreduce(res.timings["total"], op=MPI.MAX) / res.iterations
            if t < best[L][0]:
                blocked = comm.allreduce(res.timings["reductions_blocked"], op=MPI.MAX) / res.iterations
                best[L] = (t, blocked)
    return best


def print_table(comm, header, rows):
    from pipekrylov.compare import markdown_table
    if comm.Get_rank() == 0:
        print(markdown_table(header, rows))


def cpu_name():
    """The CPU's model name, for the header of a table (figures hold for one CPU)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"



def mpiexec_env():
    """The environment for the mpiexec a benchmark starts: Open MPI run as root (this
    machine's benchmarks run as root) and oversubscribed beyond the cores."""
    return dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                OMPI_MCA_rmaps_base_oversubscribe="1")
