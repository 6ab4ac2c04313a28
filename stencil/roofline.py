"""The roofline of a stencil kernel: bytes per lattice update, STREAM bandwidth, the bound.

STREAM counts 16 B per element of a copy (read a, write b), but a cache-based machine
also reads b before writing it (write-allocate), so the memory moves 24 B.  A streaming
Jacobi sweep moves the same per lattice update (read u, write u' and its allocate: 24 B;
32 B with a coefficient field), hence the memory bound of a non-blocked sweep:

    bound = (1.5 * copy bandwidth as STREAM reports it) / (bytes per update)

which for constant coefficients is just the copy's element rate, whether or not the
machine avoids the write-allocate (then copy and sweep both move 16 B).  A sweep with
streaming stores (:mod:`stencil.vector_row`) skips it: 16 B, a bound 1.5x higher.  Temporal
blocking over T steps divides the bytes per update by T until the in-core rate (a sweep
of a grid that fits in cache) becomes the limit instead.
"""
import time
from concurrent.futures import ThreadPoolExecutor

import numba
import numpy as np

from .schedulers import Sweep

__all__ = ["stream", "copy_timer", "memory_bound", "bytes_per_update"]


# Loops from 0 over whole (sliced) arrays: with a start Numba cannot prove non-negative,
# the negative-index test stays in the loop and blocks vectorization.
@numba.njit(nogil=True, cache=True)
def _copy(a, b):
    for i in range(a.size):
        b[i] = a[i]


@numba.njit(nogil=True, cache=True)
def _triad(a, b, c, s):
    for i in range(a.size):
        a[i] = b[i] + s * c[i]


def _timer(kernel, arrays, pool, threads):
    """A function that runs ``kernel`` on ``threads`` equal parts of ``arrays`` at once in
    ``pool`` and returns the seconds it took (run once here: compiled, pages faulted in)."""
    size = arrays[0].size
    parts = [slice(size * t // threads, size * (t + 1) // threads) for t in range(threads)]

    def seconds():
        start = time.perf_counter()
        list(pool.map(lambda part: kernel(*(x[part] for x in arrays)), parts))
        return time.perf_counter() - start
    seconds()
    return seconds


def stream(threads=2, nbytes=2 ** 30, repeat=5):
    """STREAM copy and triad bandwidth in bytes/s as STREAM counts them (16 and 24 B per
    element), best of ``repeat``, with ``threads`` threads on arrays of ``nbytes`` each."""
    n = nbytes // 8
    a, b, c = np.ones(n), np.full(n, 2.0), np.full(n, 0.5)
    with ThreadPoolExecutor(threads) as pool:
        copy = _timer(_copy, (a, b), pool, threads)
        triad = _timer(lambda x, y, z: _triad(x, y, z, 3.0), (a, b, c), pool, threads)
        return {"copy": 16 * n / min(copy() for _ in range(repeat)),
                "triad": 24 * n / min(triad() for _ in range(repeat))}


def copy_timer(threads, size):
    """A function that runs the STREAM copy on two arrays of ``size`` elements with
    ``threads`` threads and returns its rate in elements per second: for pairing a
    kernel's rate with the memory's at that moment (the bound for 24 B per update).
    Its threads live as long as the function."""
    seconds = _timer(_copy, (np.ones(size), np.zeros(size)), ThreadPoolExecutor(threads), threads)
    return lambda: size / seconds()


def memory_bound(copy_bandwidth, bytes_per_update):
    """Lattice updates per second a streaming sweep cannot exceed (see the module docstring)."""
    return 1.5 * copy_bandwidth / bytes_per_update


def bytes_per_update(stencil, scheduler):
    """Memory traffic per lattice update of ``scheduler`` on a grid far larger than the
    cache: the stencil's streaming traffic, without the write-allocate when a sweep uses
    streaming stores, divided by the steps a temporal blocking takes per pass."""
    if isinstance(scheduler, Sweep):
        return stencil.bytes_per_update - (8 if scheduler.streaming_stores else 0)
    return stencil.bytes_per_update / scheduler.steps_per_pass
