"""Halo exchange: the ghost values a rank's rows need from its neighbours.

The plan (who sends which owned entries to whom) is computed once from the ghost
columns; each exchange then reuses persistent requests and buffers.
"""
import weakref

import numpy as np
from mpi4py import MPI

from ..kernels import gather

__all__ = ["HaloExchange"]


def _free_requests(requests):
    """Free persistent requests: when their exchange is collected or freed, and at exit
    before MPI is finalized (weakref.finalize's exit hook, registered after mpi4py's,
    runs before it).  Requests left to the end are reported by MPICH at MPI_Finalize;
    freeing one after it crashes."""
    if not MPI.Is_finalized():
        for request in requests:
            request.Free()
    requests.clear()


class HaloExchange:
    """Persistent nonblocking exchange of ghost values.  Construction is collective.

    Parameters
    ----------
    comm : mpi4py communicator
    partition : RowPartition
    ghosts : ndarray of int64
        Sorted global indices this rank needs and does not own.
    """

    def __init__(self, comm, partition, ghosts):
        self.comm = comm
        size = comm.Get_size()
        owners = partition.owner(ghosts)
        recv_counts = np.bincount(owners, minlength=size).astype(np.int64)
        send_counts = np.empty_like(recv_counts)
        comm.Alltoall(recv_counts, send_counts)
        wanted = np.empty(send_counts.sum(), dtype=np.int64)
        comm.Alltoallv([ghosts, recv_counts], [wanted, send_counts])
        self.send_index = wanted - partition.start
        self.ghost_values = np.zeros(len(ghosts))
        self.send_values = np.zeros(len(wanted))
        self.recv_ranks = np.flatnonzero(recv_counts)
        self.send_ranks = np.flatnonzero(send_counts)
        self.requests = []
        offset = 0
        for rank, count in enumerate(recv_counts):
            if count:
                self.requests.append(comm.Recv_init(self.ghost_values[offset:offset + count], rank, tag=77))
            offset += count
        offset = 0
        for rank, count in enumerate(send_counts):
            if count:
                self.requests.append(comm.Send_init(self.send_values[offset:offset + count], rank, tag=77))
            offset += count
        self.active = False
        self._finalizer = weakref.finalize(self, _free_requests, self.requests)

    @property
    def nghosts(self):
        return len(self.ghost_values)

    def start(self, x):
        """Pack the owned values others need and start the exchange.  Collective (neighbours)."""
        gather(x, self.send_index, self.send_values)
        if self.requests:
            MPI.Prequest.Startall(self.requests)
        self.active = True

    def test(self):
        """Poke progress; True when the exchange is complete."""
        return not self.requests or MPI.Request.Testall(self.requests)

    def finish(self):
        """Wait for the exchange; return the ghost values."""
        if self.active and self.requests:
            MPI.Request.Waitall(self.requests)
        self.active = False
        return self.ghost_values

    def free(self):
        """Free the persistent requests (local)."""
        self._finalizer()
