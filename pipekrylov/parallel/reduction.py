"""The fused nonblocking reduction: post k local scalars, overlap local work, wait.

This is the one step every pipelined method is built around (PETSc's
``VecDotBegin ... PetscCommSplitReductionBegin ... VecDotEnd``).  The object also

* keeps a trace of events (start, local work, wait and how long the wait blocked) that
  tests and benchmarks read;
* can inject latency: a wait does not complete before ``start + latency``, emulating the
  reduction of a large machine on a small one;
* pokes progress (``MPI_Test``) when asked, so overlap happens without a progress thread;
* carries a failure flag: an exception of user code on one rank (a callback, a callable
  preconditioner or monitor) is recorded with :meth:`FusedReduction.fail`, travels as one
  more summand of the next reduction, and is raised on every rank at its end, as the
  original exception.  The ranks meet at every reduction, so no rank waits forever for
  one that failed, and it costs no message of its own.
"""
import time
from collections import namedtuple
from contextlib import contextmanager

import numpy as np
from mpi4py import MPI

from .errors import raise_on_any

__all__ = ["FusedReduction", "PendingReduction", "Event"]

Event = namedtuple("Event", "kind label start end id")
"""kind: 'start', 'work' or 'wait'; for 'wait', end - start is the time the wait blocked."""


class PendingReduction:
    """One started Iallreduce.  ``wait()`` returns the global sums."""

    def __init__(self, owner, ident, label, request, result, started):
        self.owner, self.id, self.label = owner, ident, label
        self.request, self.result, self.started = request, result, started
        self.done = False

    def test(self):
        if not self.done:
            self.done = self.request.Test()
        return self.done

    def wait(self):
        """Complete the reduction (not before start + latency).  Collective."""
        owner = self.owner
        if self.done and self not in owner.pending:  # completed when a failure was raised
            return self.result[:-1]
        t0 = time.perf_counter()
        ready = self.started + owner.latency
        while time.perf_counter() < ready:
            self.test()
        if not self.done:
            self.request.Wait()
            self.done = True
        t1 = time.perf_counter()
        owner.blocked_time += t1 - t0
        owner._record("wait", self.label, t0, t1, self.id)
        owner.pending.remove(self)
        if self.result[-1] > 0:  # some rank's user code failed: every rank raises it here
            owner.raise_failure()
        return self.result[:-1]


class FusedReduction:
    """Global sums of several local scalars with one ``MPI_Iallreduce`` (pipelined), or
    one ``MPI_Allreduce`` (:meth:`allreduce`, the classic methods').

    Parameters
    ----------
    comm : mpi4py communicator
    latency : float
        Injected latency in seconds (default 0): a reduction never completes earlier
        than ``latency`` after it started.
    trace : bool
        Record events in :attr:`events`.

    Examples
    --------
    >>> red = FusedReduction(comm)
    >>> pending = red.start([r @ u, w @ u], "gamma, delta")
    >>> with red.work("spmv"):
    ...     A.matvec(w, q, progress=red.progress)
    >>> gamma, delta = pending.wait()
    """

    def __init__(self, comm, latency=0.0, trace=True):
        self.comm = comm
        self.single = comm.Get_size() == 1
        self.latency = float(latency)
        self.trace = trace
        self._events = []      # Events, and blocks of the compiled loop's trace not yet read
        self._unread = False   # whether _events holds such blocks
        self.pending = []
        self.blocked_time = 0.0
        self.count = 0
        self.t_origin = time.perf_counter()
        self.failure = None

    def fail(self, error):
        """Record an exception of user code on this rank; the next reduction to complete
        raises it on every rank.  Local: this rank carries on to that reduction."""
        if self.failure is None:
            self.failure = error
        if self.comm.Get_size() == 1:
            self.raise_failure()

    def start(self, values, label=""):
        """Start one Iallreduce (sum) of the given local scalars.  Collective."""
        send = self._send_buffer(values)
        now = time.perf_counter()
        if self.single:   # the sums are the values: no MPI call (as PETSc on one process)
            result, request = send.copy(), MPI.REQUEST_NULL
        else:
            result = np.empty_like(send)
            request = self.comm.Iallreduce(send, result, op=MPI.SUM)
        self.count += 1
        pending = PendingReduction(self, self.count, label, request, result, now)
        pending._send = send  # the buffer must live until completion
        self.pending.append(pending)
        self._record("start", label, now, now, self.count)
        return pending

    def _send_buffer(self, values):
        """The local values and, last, this rank's failure flag: what a reduction sums."""
        values = np.asarray(values, dtype=np.float64).ravel()
        send = np.empty(values.size + 1)
        send[:-1] = values
        send[-1] = self.failure is not None
        return send

    def agree(self):
        """Where a solve ends: a failure after its last reduction reaches every rank too.
        Collective: one blocking Allreduce of the flag, neither counted nor traced nor
        delayed by the injected latency (it belongs to no method)."""
        flag = np.array([float(self.failure is not None)])
        if self.comm.Get_size() > 1:
            self.comm.Allreduce(MPI.IN_PLACE, flag, op=MPI.SUM)
        if flag[0] > 0:
            self.raise_failure()

    def raise_failure(self):
        """Raise the recorded failure on every rank (a reduction's flag said some rank
        has one).  Collective."""
        for pending in list(self.pending):  # every rank started them: they complete
            pending.request.Wait()
            pending.done = True
            self.pending.remove(pending)
        error, self.failure = self.failure, None
        if self.comm.Get_size() == 1:
            raise error
        raise_on_any(self.comm, error)
        raise RuntimeError("a rank's user code failed")  # unreachable: raise_on_any raised

    def allreduce(self, values, label=""):
        """The blocking reduction of the classic methods: one ``MPI_Allreduce`` (Open MPI
        4.1 completes an ``MPI_Iallreduce`` waited for at once in two rounds of messages,
        its blocking one in one), not done before its start + the latency, counted and
        traced as a reduction started and waited for at once.  Collective."""
        if self.pending:   # others outstanding (not the classic methods'): completed in order
            return self.start(values, label).wait()
        send = self._send_buffer(values)
        t0 = time.perf_counter()
        self.count += 1
        self._record("start", label, t0, t0, self.count)
        if self.single:   # the sums are the values: no MPI call (as PETSc on one process)
            result = send
        else:
            result = np.empty_like(send)
            self.comm.Allreduce(send, result, op=MPI.SUM)
        while time.perf_counter() < t0 + self.latency:
            pass
        t1 = time.perf_counter()
        self.blocked_time += t1 - t0
        self._record("wait", label, t0, t1, self.count)
        if result[-1] > 0:  # some rank's user code failed: every rank raises it here
            self.raise_failure()
        return result[:-1]

    def progress(self):
        """Poke every outstanding reduction (MPI_Test)."""
        for pending in self.pending:
            pending.test()

    @contextmanager
    def work(self, label):
        """Record a span of local work (an SpMV, a preconditioner) in the trace."""
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self._record("work", label, t0, time.perf_counter(), None)

    def record_compiled(self, rows, labels, clock_offset):
        """Account for reductions the compiled loop ran: ``rows`` of (start, overlap
        begin, overlap end, wait begin, wait end, label index) in MPI_Wtime seconds,
        ``clock_offset`` = perf_counter - MPI_Wtime.  Each becomes the events the
        Python loop records, in the same order."""
        first = self.count + 1
        self.count += len(rows)
        self.blocked_time += float((rows[:, 4] - rows[:, 3]).sum())
        if self.trace:   # made into Events when read: a solve does not pay for them
            self._events.append((rows.copy(), labels, clock_offset - self.t_origin, first))
            self._unread = True

    @property
    def events(self):
        """The trace: Events in the order they happened."""
        if self._unread:
            events = []
            for item in self._events:
                if isinstance(item, Event):
                    events.append(item)
                    continue
                rows, labels, shift, ident = item
                for j, (t_start, w0, w1, t0, t1, k) in enumerate(rows.tolist()):
                    label = labels[int(k)]
                    events.append(Event("start", label, t_start + shift, t_start + shift, ident + j))
                    if w1 > w0:   # a blocking reduction (a classic method's) overlaps nothing
                        events.append(Event("work", "overlap", w0 + shift, w1 + shift, None))
                    events.append(Event("wait", label, t0 + shift, t1 + shift, ident + j))
            self._events, self._unread = events, False
        return self._events

    def _record(self, kind, label, t0, t1, ident):
        if self.trace:
            self._events.append(Event(kind, label, t0 - self.t_origin, t1 - self.t_origin, ident))

    def summary(self):
        """Counts and times: reductions, waits that blocked and for how long."""
        waits = [e for e in self.events if e.kind == "wait"]
        return {"reductions": self.count, "blocked_time": self.blocked_time,
                "waits": len(waits), "max_blocked": max((e.end - e.start for e in waits), default=0.0)}
