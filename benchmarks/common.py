"""Helpers the benchmarks share: timing across ranks, a STREAM triad, table printing."""
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


def best_times(comm, funcs, repeat=20):
    """Best times of several functions measured in interleaved rounds.

    Interleaving spreads the machine's noise over all candidates alike, so their ratios
    mean something on a shared, noisy machine.
    """
    for func in funcs.values():
        func()
    best = {name: np.inf for name in funcs}
    for _ in range(repeat):
        for name, func in funcs.items():
            comm.Barrier()
            t0 = time.perf_counter()
            func()
            best[name] = min(best[name], comm.allreduce(time.perf_counter() - t0, op=max_op()))
    return best


def max_op():
    from mpi4py import MPI
    return MPI.MAX


def stream_triad(comm, n_per_rank):
    """Aggregate triad bandwidth (bytes/s) of all ranks at once: 24 bytes per element."""
    a, b, c = np.zeros(n_per_rank), np.ones(n_per_rank), np.ones(n_per_rank)
    t = best_time(comm, lambda: triad(a, b, c, 3.0))
    return 24.0 * n_per_rank * comm.Get_size() / t


def per_iteration(comm, solver, A, b, iterations, repeat, latency=0.0, M="jacobi"):
    """Best over ``repeat`` solves of exactly ``iterations`` iterations (rtol 0): the
    slowest rank's time per iteration and its time blocked in reductions per iteration."""
    from mpi4py import MPI
    best, blocked = np.inf, np.nan
    for _ in range(repeat):
        comm.Barrier()
        res = solver(A, b, rtol=0.0, maxiter=iterations, M=M, latency=latency)
        t = comm.allreduce(res.timings["total"], op=MPI.MAX) / res.iterations
        if t < best:
            best = t
            blocked = comm.allreduce(res.timings["reductions_blocked"], op=MPI.MAX) / res.iterations
    return best, blocked


def print_table(comm, header, rows):
    from pipekrylov.compare import markdown_table
    if comm.Get_rank() == 0:
        print(markdown_table(header, rows))
