"""Parareal in one process: one thread per time slice, sharing memory.

As in Ruprecht's OpenMP version, each slice has one lock (here a condition variable
guarding its mailbox) and the propagators do the work outside Python's GIL: Numba
``nogil`` kernels and NumPy's array operations release it, so the threads run in
parallel.  The state is shared, not copied between processes: the memory footprint is
one interpreter and one copy of the problem instead of P.
"""
import threading

import numpy as np

from .common import SliceFailed, clock, drive_slice, make_slices, restore_slices, summarize

__all__ = ["run_threads"]


class _Mailbox:
    """Values sent to one slice, by iteration; one lock."""

    def __init__(self, abort):
        self.condition, self.values, self.abort = threading.Condition(), {}, abort

    def put(self, k, value):
        with self.condition:
            self.values[k] = value
            self.condition.notify_all()

    def take(self, k):
        with self.condition:
            while k not in self.values:
                if self.abort.is_set():
                    raise SliceFailed("another slice failed")
                self.condition.wait(timeout=0.05)  # and check for an abort now and then
            return self.values.pop(k)


class _ThreadLink:
    def __init__(self, index, mailboxes, barrier, flags, abort):
        self.index, self.mailboxes, self.barrier, self.flags = index, mailboxes, barrier, flags
        self.abort = abort
        self.synchronous = barrier is not None
        self.iteration = -1

    def send(self, k, u, converged):
        if self.index + 1 < len(self.mailboxes):
            self.mailboxes[self.index + 1].put(k, (u, converged))

    def receive(self, k):
        return self.mailboxes[self.index].take(k)

    def synchronize(self, k, converged):
        self.flags[self.index] = converged
        try:
            self.barrier.wait()
            everyone = all(self.flags)
            self.barrier.wait()  # nobody overwrites a flag before all have read them
        except threading.BrokenBarrierError:
            raise SliceFailed("another slice failed") from None
        return everyone


def run_threads(u0, coarse, fine, config, pipelined=True, hooks=()):
    """Parareal with ``config.slices`` threads in this process.

    Same arguments and result as :func:`~parareal.run_mpi`, without the communicator.
    The propagators must release the GIL to run in parallel (Numba ``nogil`` kernels,
    NumPy on large arrays); they are called from several threads at once and must not
    keep state between calls.
    """
    start = clock()
    u0 = np.asarray(u0, dtype=float)
    P = config.slices
    slices, checkpoint, saved = make_slices(range(P), u0, config, coarse, fine, hooks)
    restart = restore_slices(slices, checkpoint, saved)
    abort = threading.Event()
    mailboxes = [_Mailbox(abort) for _ in range(P)]
    barrier = None if pipelined else threading.Barrier(P)
    flags = [False] * P
    errors = [None] * P

    def work(n):
        link = _ThreadLink(n, mailboxes, barrier, flags, abort)
        try:
            drive_slice(slices[n], link, u0, hooks, restart)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller
            errors[n] = exc
            abort.set()
            if barrier is not None:
                barrier.abort()

    threads = [threading.Thread(target=work, args=(n,), name=f"parareal-slice-{n}", daemon=True)
               for n in range(P)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    first = next((e for e in errors if e is not None and not isinstance(e, SliceFailed)), None)
    if first is not None:
        raise first
    result = summarize(slices, slices[-1].u_out, "threads-pipelined" if pipelined else "threads-standard",
                       config, clock() - start, restart)
    for hook in hooks:
        hook.at_end(result, slices)
    return result
