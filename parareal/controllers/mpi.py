"""Parareal over MPI, one rank per time slice: standard and pipelined.

*Pipelined* (the default): no collective during the run.  A rank starts its next fine
run as soon as it has sent its output and waits only for its predecessor's next value.
*Standard*: every iteration ends with a global reduction (who has converged), so the
coarse sweep of one iteration never overlaps the fine runs of the next.

A failure on one rank reaches all: the failing rank sends a notice to every other rank,
ranks waiting for a value watch for it, and the run ends with one collective check that
raises the same error everywhere.
"""
import time

import numpy as np

from pipekrylov.parallel.errors import raise_on_any

from .common import SliceFailed, clock, drive_slice, make_slices, restore_slices, summarize

__all__ = ["run_mpi"]

_FAILED = 1  # tag of a failure notice; values use tags 2 + 2k + converged


class MPILink:
    """Moves slice values between neighbouring ranks of ``comm`` (rank n = slice n)."""

    def __init__(self, comm, shape, synchronous):
        from mpi4py import MPI
        self.MPI, self.comm, self.shape, self.synchronous = MPI, comm, shape, synchronous
        self.rank, self.size = comm.Get_rank(), comm.Get_size()
        self.iteration = -1
        self.synchronized = set()
        self.sends, self.notices = [], []
        self.received = np.zeros(self.size, dtype=np.int64)   # messages taken, by source
        self.failure = comm.irecv(source=MPI.ANY_SOURCE, tag=_FAILED)
        self.peer_failed = None

    def send(self, k, u, converged):
        if self.rank + 1 < self.size:
            u = np.ascontiguousarray(u, dtype=float)
            self.sends.append((self.comm.Isend(u, self.rank + 1, tag=2 + 2 * k + int(converged)), u))

    def receive(self, k):
        buffer = np.empty(self.shape)
        request = self.comm.Irecv(buffer, self.rank - 1, tag=self.MPI.ANY_TAG)
        status = self.MPI.Status()
        pause = 1e-5
        while not request.Test(status):
            if self._peer_failed():
                request.Cancel()
                request.Wait(status)
                if not status.Is_cancelled():  # it matched after all: counted for close()
                    self.received[self.rank - 1] += 1
                raise SliceFailed(self.peer_failed)
            time.sleep(pause)  # poll, do not spin: oversubscribed ranks share cores
            pause = min(2 * pause, 1e-3)
        self.received[self.rank - 1] += 1
        k_sent, converged = divmod(status.Get_tag() - 2, 2)
        if k_sent != k:
            raise RuntimeError(f"slice {self.rank}: expected iteration {k}, received {k_sent}")
        return buffer, bool(converged)

    def synchronize(self, k, converged, failed=False):
        """End of iteration k in the standard controller: ``all converged``.  Collective."""
        flags = np.array([int(failed), int(not converged)], dtype=np.int32)
        self.comm.Allreduce(self.MPI.IN_PLACE, flags, op=self.MPI.MAX)
        self.synchronized.add(k)
        if flags[0] and not failed:
            raise SliceFailed("another slice failed")
        return not flags[1]

    def fail(self, exc):
        """This rank failed: wake the others, and meet them where they wait."""
        if not isinstance(exc, SliceFailed):
            message = f"slice {self.rank}: {type(exc).__name__}: {exc}"
            self.notices = [self.comm.isend(message, r, tag=_FAILED)
                            for r in range(self.size) if r != self.rank]
        if self.synchronous and self.iteration not in self.synchronized:
            self.synchronize(self.iteration, True, failed=True)

    def _peer_failed(self):
        if self.peer_failed is None and self.failure is not None:
            status = self.MPI.Status()
            done, message = self.failure.test(status)
            if done:
                self.peer_failed, self.failure = message, None
                self.received[status.Get_source()] += 1
        return self.peer_failed is not None

    def close(self):
        """Take every message still on its way, then complete every send.  Collective.

        After a failure, values and notices may have been sent that nobody received.  Left
        queued, they would meet a later run: MPICH gives a freed communicator's context to
        the next one at once.  So the ranks exchange how many messages each sent to each,
        and every rank receives what it has not yet taken.
        """
        MPI = self.MPI
        if self.failure is not None:
            status = MPI.Status()
            self.failure.Cancel()
            self.failure.wait(status)
            if not status.Is_cancelled():
                self.received[status.Get_source()] += 1
            self.failure = None
        sent = np.zeros(self.size, dtype=np.int64)
        if self.rank + 1 < self.size:
            sent[self.rank + 1] = len(self.sends)
        for r in range(self.size):
            if self.notices and r != self.rank:
                sent[r] += 1
        expected = np.empty_like(sent)
        self.comm.Alltoall(sent, expected)
        status = MPI.Status()
        for source in np.flatnonzero(expected > self.received):
            for _ in range(expected[source] - self.received[source]):
                self.comm.Probe(source, MPI.ANY_TAG, status)
                if status.Get_tag() == _FAILED:
                    self.comm.recv(source=source, tag=_FAILED)
                else:
                    self.comm.Recv(np.empty(self.shape), source, status.Get_tag())
        MPI.Request.Waitall(self.notices + [r for r, _ in self.sends])


def run_mpi(u0, coarse, fine, config, comm=None, pipelined=True, hooks=()):
    """Parareal with one time slice per rank of ``comm``.  Collective.

    Parameters
    ----------
    u0 : ndarray
        Initial value (the same on every rank; used by rank 0).
    coarse, fine : callable ``(u, t0, t1) -> u``
    config : PararealConfig
        ``config.slices`` must equal the size of ``comm``.
    comm : mpi4py communicator, default COMM_WORLD
    pipelined : bool
        False: the standard controller, with a global synchronization per iteration.
    hooks : sequence of Hook
        Called on the rank owning each slice.  A :class:`~parareal.hooks.Checkpoint`
        makes the run resume from the files it finds.

    Returns
    -------
    PararealResult
        The same on every rank (``history`` included when kept).
    """
    from mpi4py import MPI
    comm = MPI.COMM_WORLD if comm is None else comm
    error = None
    if config.slices != comm.Get_size():
        error = ValueError(f"config.slices = {config.slices} but the communicator has "
                           f"{comm.Get_size()} ranks: the MPI controllers run one slice per rank")
    raise_on_any(comm, error, "parareal.run_mpi")
    comm = comm.Dup()  # our messages can never match the application's
    try:
        return _run(MPI, comm, np.asarray(u0, dtype=float), coarse, fine, config, pipelined, hooks)
    finally:
        comm.Free()


def _run(MPI, comm, u0, coarse, fine, config, pipelined, hooks):
    rank, last = comm.Get_rank(), comm.Get_size() - 1
    start = clock()
    error = None
    try:
        (s,), checkpoint, saved = make_slices([rank], u0, config, coarse, fine, hooks)
    except Exception as exc:  # noqa: BLE001 - raised on every rank below
        error = exc
    raise_on_any(comm, error, "parareal.run_mpi")
    saved_everywhere = comm.allgather(saved[0]) if saved else []
    restart = -1
    try:
        restart = restore_slices([s], checkpoint, saved_everywhere)
    except Exception as exc:  # noqa: BLE001 - an unreadable checkpoint, say
        error = exc
    raise_on_any(comm, error, "parareal.run_mpi: restoring the checkpoint")
    link = MPILink(comm, u0.shape, synchronous=not pipelined)
    try:
        drive_slice(s, link, u0, hooks, restart)
    except Exception as exc:  # noqa: BLE001 - reported on every rank below
        error = exc
        link.fail(exc)
    link.close()
    # a SliceFailed only echoes the first error, which its own rank reports
    raise_on_any(comm, None if isinstance(error, SliceFailed) else error, "parareal.run_mpi")
    u_end = comm.bcast(s.u_out if rank == last else None, root=last)
    everyone = comm.allgather(_SliceSummary(s))
    result = summarize(everyone, u_end, "mpi-pipelined" if pipelined else "mpi-standard",
                       config, clock() - start, restart)
    for hook in hooks:
        hook.at_end(result, [s])
    return result


class _SliceSummary:
    """What the other ranks need to know of a slice for the result."""

    def __init__(self, s):
        for key in ("index", "iteration", "converged_at", "changes", "fine_runs",
                    "coarse_runs", "fine_time", "coarse_time", "history"):
            setattr(self, key, getattr(s, key))
