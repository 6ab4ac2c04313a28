"""Memory a run will need, checked before it allocates.

A size typed by mistake (``poisson2d:200000``, a Matrix Market header declaring 10^12
rows, ``n=1000000``) must end in one clear line, not in a MemoryError traceback on every
rank or in the kernel's OOM killer after minutes of swapping.  The estimates are rough
(within a small factor): they only tell a run that cannot fit from one that may.
Imports nothing heavy (``pipekrylov scaling run`` must not start MPI).
"""
import os

__all__ = ["available_memory", "check_memory", "format_bytes"]


def available_memory():
    """Bytes this machine can still give a run: Linux's MemAvailable (free memory plus
    what the page cache can drop), else the physical memory; at most RLIMIT_AS."""
    available = None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    available = int(line.split()[1]) * 1024
                    break
    except (OSError, ValueError, IndexError):
        pass
    if available is None:
        try:
            available = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError):
            return float("inf")   # no way to know: check nothing
    try:
        import resource
        limit = resource.getrlimit(resource.RLIMIT_AS)[0]
        if limit != resource.RLIM_INFINITY:
            available = min(available, limit)
    except (ImportError, OSError, ValueError):
        pass
    return available


def format_bytes(n):
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if n < 1024 or unit == "PiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024


def _processes_on_this_machine(comm):
    """How many of ``comm``'s processes share this machine's memory (collective), or the
    launcher's count of them on this node when MPI is not started."""
    if comm is not None and comm.Get_size() > 1:
        from mpi4py import MPI
        node = comm.Split_type(MPI.COMM_TYPE_SHARED)
        try:
            return node.Get_size()
        finally:
            node.Free()
    for var in ("OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"):
        if os.environ.get(var, "").isdigit():
            return max(1, int(os.environ[var]))
    return 1


def check_memory(what, per_process, comm=None, once=0):
    """Raise ``ValueError`` if ``per_process`` bytes in each process of ``comm`` (or this
    process alone) and ``once`` bytes more (what rank 0 alone gathers) exceed the memory
    of the machines they share.  Collective when ``comm`` has more than one rank: every
    rank decides alike, on the tightest machine, and raises the same message.  ``what``
    opens the message: ``"<what> needs about ..."``."""
    sharing = _processes_on_this_machine(comm)
    available = available_memory()
    if comm is not None and comm.Get_size() > 1:
        from mpi4py import MPI
        _, sharing, available = comm.allreduce((available - per_process * sharing, sharing, available), op=MPI.MIN)
    need = per_process * sharing + once
    if need <= available:
        return
    detail = ""
    if sharing > 1:
        detail = f" ({sharing} processes on one machine, {format_bytes(per_process)} each" + (
            f", {format_bytes(once)} more on rank 0)" if once else ")")
    raise ValueError(f"{what} needs about {format_bytes(need)}{detail}, more than the "
                     f"{format_bytes(available)} of memory available")
