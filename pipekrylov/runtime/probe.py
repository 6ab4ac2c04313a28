"""What the loops' communication costs a rank, measured from compiled code as the loops
communicate (:func:`pipekrylov.model.communication_costs` runs it)."""
from ..kernels.compile import hot
from .reduce import MPI_Allreduce, MPI_Iallreduce, MPI_Test, MPI_Wait, MPI_Wtime
from .csr import MPI_Startall, MPI_Waitall

__all__ = ["communication"]


@hot
def communication(send, recv, halo, halo_status, handles, request, flag, status, phase, hold, out):
    """In ``out[k]`` for each of ``out.shape[0]`` repetitions.  Phase 0: (0) a nonblocking
    Allreduce started and waited for at once (the pipelined methods' reduction, unhidden);
    (2) a halo exchange on the persistent requests ``halo`` (started and completed as the
    loops' SpMV does: Open MPI's shared memory sends a blocking message of a few hundred
    bytes inline, 0.4 us sooner than a persistent one); (3) a blocking Allreduce, as the
    classic methods' loops reduce.  Phase 1: (1) the processor time of a nonblocking
    Allreduce left to itself for ``hold`` seconds but for one MPI_Test halfway (as the
    halo's MPI calls advance it in a loop): its start, the test and its completion.
    Returns the first MPI error code, or 0."""
    count = send.shape[0]
    for k in range(out.shape[0]):
        t0 = MPI_Wtime()
        e = MPI_Iallreduce(send.ctypes.data, recv.ctypes.data, count, handles[0], handles[1], handles[2],
                           request.ctypes.data)
        if e != 0:
            return e
        if phase == 0:
            e = MPI_Wait(request.ctypes.data, status.ctypes.data)
            out[k, 0] = MPI_Wtime() - t0
        else:
            t1 = MPI_Wtime()
            while MPI_Wtime() < t1 + hold / 2:
                pass
            t2 = MPI_Wtime()
            e = MPI_Test(request.ctypes.data, flag.ctypes.data, status.ctypes.data)
            t3 = MPI_Wtime()
            while MPI_Wtime() < t1 + hold:
                pass
            t4 = MPI_Wtime()
            if e == 0:
                e = MPI_Wait(request.ctypes.data, status.ctypes.data)
            out[k, 1] = (t1 - t0) + (t3 - t2) + (MPI_Wtime() - t4)
        if e != 0:
            return e
    for k in range(out.shape[0] if phase == 0 else 0):
        t0 = MPI_Wtime()
        e = MPI_Startall(halo.shape[0], halo.ctypes.data)
        if e == 0:
            e = MPI_Waitall(halo.shape[0], halo.ctypes.data, halo_status.ctypes.data)
        if e != 0:
            return e
        out[k, 2] = MPI_Wtime() - t0
    for k in range(out.shape[0] if phase == 0 else 0):
        t0 = MPI_Wtime()
        e = MPI_Allreduce(send.ctypes.data, recv.ctypes.data, count, handles[0], handles[1], handles[2])
        if e != 0:
            return e
        out[k, 3] = MPI_Wtime() - t0
    return 0
