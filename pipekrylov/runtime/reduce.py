"""Fused reductions for compiled loops: one ``MPI_Iallreduce`` (or, blocking, one
``MPI_Allreduce``) of a few local scalars per reduction, in *slots* so that several can
be in flight (a deep pipeline's).

Every reduction carries three more summands: this rank's failure flag (user code or
input that failed on it: every rank learns it at the same reduction and the driver
raises the original error everywhere) and this solve's argument hash ``h`` with ``h^2``
(the ranks were called alike exactly when ``p sum(h^2) = (sum h)^2``, by Cauchy-Schwarz;
the hash is small enough that both sums are exact).  So a solve checks its arguments and
its ranks' health in the reductions it makes anyway.

Each reduction is a row of the trace: (start, overlap begin, overlap end, wait begin,
wait end, label).  A wait does not complete before ``start + F[LATENCY]`` (the injected
latency of a larger machine), poking the request meanwhile.
"""
from collections import namedtuple


from ..kernels.compile import hot
import numpy as np

from ..parallel import native
from .layout import DISAGREE, FAILED, FLAG, AGREE, LATENCY, MPI_ERROR, MPI_FAILED, NONE, RANKS, TRACE

__all__ = ["Reductions", "reductions", "start", "poke", "wait", "allreduce", "drain", "EXTRA"]

_mpi = native.declarations()
MPI_Iallreduce, MPI_Allreduce = _mpi["MPI_Iallreduce"], _mpi["MPI_Allreduce"]
MPI_Test, MPI_Wait, MPI_Wtime = _mpi["MPI_Test"], _mpi["MPI_Wait"], _mpi["MPI_Wtime"]

EXTRA = 3   # summands after a reduction's values: the failure flag, h, h^2

Reductions = namedtuple("Reductions", "handles requests send recv started row count flag status")
"""A loop's reduction slots: MPI handles (double, sum, comm), a request per slot, send and
receive buffers per slot, each slot's start time, trace row and count, MPI_Test scratch."""


def reductions(comm, slots, width):
    """The operands of ``slots`` reductions of at most ``width`` values on ``comm``."""
    from mpi4py import MPI
    return Reductions(native.handles([MPI.DOUBLE, MPI.SUM, comm]), native.handles([MPI.REQUEST_NULL] * slots),
                      np.zeros((slots, width + EXTRA)), np.zeros((slots, width + EXTRA)), np.zeros(slots),
                      np.full(slots, -1, np.int64), np.zeros(slots, np.int64), np.zeros(1, np.int32),
                      native.status_buffer())


@hot
def _prepare(R, slot, count, label, I, F, trace):
    """Append the flag and the hash to the slot's values; open its trace row."""
    send = R.send[slot]
    send[count] = F[FLAG]
    send[count + 1] = F[AGREE]
    send[count + 2] = F[AGREE] * F[AGREE]
    t = MPI_Wtime()
    row = I[TRACE]
    I[TRACE] = row + 1
    trace[row, 0] = t
    trace[row, 1] = t
    trace[row, 2] = t
    trace[row, 5] = label
    R.started[slot] = t
    R.row[slot] = row
    R.count[slot] = count


@hot
def _check(R, slot, I):
    """The event a completed reduction ends the loop with: an MPI error, a rank's
    failure, ranks called differently; else NONE."""
    if I[MPI_ERROR] != 0:
        return MPI_FAILED
    recv, count = R.recv[slot], R.count[slot]
    if recv[count] > 0.0:
        return FAILED
    if I[RANKS] * recv[count + 2] != recv[count + 1] * recv[count + 1]:
        return DISAGREE
    return NONE


@hot
def start(R, slot, count, label, I, F, trace):
    """Start the reduction (sum) of ``R.send[slot, :count]``.  On one rank the sums are the
    values: no MPI call, as PETSc makes none on one process."""
    _prepare(R, slot, count, label, I, F, trace)
    send = R.send[slot]
    if I[RANKS] == 1:
        for j in range(count + EXTRA):
            R.recv[slot, j] = send[j]
        return
    h = R.handles
    e = MPI_Iallreduce(send.ctypes.data, R.recv[slot].ctypes.data, count + EXTRA, h[0], h[1], h[2],
                       R.requests[slot:slot + 1].ctypes.data)
    if e != 0:
        I[MPI_ERROR] = e


@hot
def poke(R, slot, I):
    """MPI_Test the reduction in ``slot`` (none: a negative slot), for progress without a
    thread; a completed request is MPI_REQUEST_NULL and testing it is a no-op."""
    if slot >= 0 and I[RANKS] > 1:
        MPI_Test(R.requests[slot:slot + 1].ctypes.data, R.flag.ctypes.data, R.status.ctypes.data)


@hot
def wait(R, slot, I, F, trace):
    """Complete the reduction in ``slot``, not before its start + the injected latency;
    its sums are ``R.recv[slot]``.  Returns the event that ends the loop, or NONE."""
    row = R.row[slot]
    t0 = MPI_Wtime()
    trace[row, 2] = t0
    trace[row, 3] = t0
    if F[LATENCY] > 0.0:
        ready = R.started[slot] + F[LATENCY]
        while MPI_Wtime() < ready:
            poke(R, slot, I)
    if I[RANKS] > 1:
        e = MPI_Wait(R.requests[slot:slot + 1].ctypes.data, R.status.ctypes.data)
        if e != 0:
            I[MPI_ERROR] = e
    trace[row, 4] = MPI_Wtime()
    R.row[slot] = -1
    return _check(R, slot, I)


@hot
def allreduce(R, slot, count, label, I, F, trace):
    """A blocking reduction (a classic method's): one ``MPI_Allreduce``, which Open MPI 4.1
    completes in one round of messages where an ``MPI_Iallreduce`` waited for at once
    takes two; not done before its start + the injected latency, traced with no
    overlap.  Returns the event that ends the loop, or NONE."""
    _prepare(R, slot, count, label, I, F, trace)
    send = R.send[slot]
    row, t0 = R.row[slot], R.started[slot]
    trace[row, 3] = t0
    if I[RANKS] == 1:
        for j in range(count + EXTRA):
            R.recv[slot, j] = send[j]
    else:
        h = R.handles
        e = MPI_Allreduce(send.ctypes.data, R.recv[slot].ctypes.data, count + EXTRA, h[0], h[1], h[2])
        if e != 0:
            I[MPI_ERROR] = e
    if F[LATENCY] > 0.0:
        while MPI_Wtime() < t0 + F[LATENCY]:
            pass
    trace[row, 4] = MPI_Wtime()
    R.row[slot] = -1
    return _check(R, slot, I)


@hot
def drain(R, I, F, trace):
    """Complete every reduction still in flight, oldest first (every rank started the
    same ones).  Returns the first event a completion ends the loop with, or NONE."""
    first = NONE
    while True:
        slot = -1
        for s in range(R.row.shape[0]):
            if R.row[s] >= 0 and (slot < 0 or R.row[s] < R.row[slot]):
                slot = s
        if slot < 0:
            return first
        event = wait(R, slot, I, F, trace)
        if first == NONE:
            first = event
