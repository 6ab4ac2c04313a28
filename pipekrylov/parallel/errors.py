"""Errors that reach every rank.

A check that fails on one rank must fail on all of them, or the ranks that passed walk
into the next collective and wait forever.  Every collective entry point of the package
runs its input checks inside :func:`collective_check`.
"""
from contextlib import contextmanager

import numpy as np

__all__ = ["collective_check", "raise_on_any", "CollectiveError", "format_ranks"]


class CollectiveError(RuntimeError):
    """Ranks failed with different exception types; the message names each rank."""


def raise_on_any(comm, error, what=""):
    """Raise on every rank if ``error`` is not None on any rank.  Collective.

    Parameters
    ----------
    comm : mpi4py communicator
    error : Exception or None
        This rank's error.
    what : str
        Prefix naming the operation, for the message.

    Raises
    ------
    Exception
        The failing ranks' exception type when they agree, else :class:`CollectiveError`;
        the message lists each failing rank and its reason.  A KeyboardInterrupt or
        SystemExit is re-raised as itself where it was raised; the other ranks raise a
        :class:`CollectiveError` naming it.
    """
    local = None if error is None else (type(error), _text(error))
    if comm is None or comm.Get_size() == 1:
        failures = [local]
    else:
        # a flag first (no pickling): the checks pass far more often than they fail.
        # (mpi4py.MPI imported here, not at the top: importing it starts MPI, which a
        # process that only launches mpiexec, e.g. `pipekrylov scaling run`, must not do)
        from mpi4py import MPI
        flag = np.array([error is not None], dtype=np.int32)
        comm.Allreduce(MPI.IN_PLACE, flag, op=MPI.MAX)
        if not flag[0]:
            return
        failures = comm.allgather(local)
    failed = [(rank, f) for rank, f in enumerate(failures) if f is not None]
    if not failed:
        return
    types = {f[0] for _, f in failed}
    reasons = {}
    for rank, (_, text) in failed:
        reasons.setdefault(text, []).append(rank)
    if len(failures) == 1:
        message = next(iter(reasons))
    else:
        message = "; ".join(f"rank {format_ranks(r)}: {text}" for text, r in reasons.items())
    if what:
        message = f"{what}: {message}"
    kind = types.pop() if len(types) == 1 else CollectiveError
    if error is not None and not isinstance(error, Exception):
        raise error   # a KeyboardInterrupt or SystemExit stays itself (its exit status) where it was raised
    if not issubclass(kind, Exception):   # the others stop with an error naming it
        kind = CollectiveError
    try:
        exc = kind(message)
    except Exception:  # exception types whose constructor wants more than a message
        exc = CollectiveError(message)
    if error is not None:
        raise exc from error
    raise exc


def _text(error):
    """An error's message; a KeyboardInterrupt or SystemExit, which have none worth the
    name, by its type: ``SystemExit(3)``, ``KeyboardInterrupt``."""
    if isinstance(error, Exception):
        return str(error)
    return f"{type(error).__name__}({error})" if str(error) else type(error).__name__


def format_ranks(ranks):
    """'0,2,5', or '0..99 (100 ranks)' for many: a list of ranks in a message."""
    return ",".join(map(str, ranks)) if len(ranks) < 6 else f"{ranks[0]}..{ranks[-1]} ({len(ranks)} ranks)"


@contextmanager
def collective_check(comm, what=""):
    """Run a block on every rank; if it raises anywhere, raise everywhere.  Collective.

    >>> with collective_check(comm, "read_matrix_market"):
    ...     header = parse_header(path)        # may fail on one rank only
    """
    error = None
    try:
        yield
    except Exception as exc:  # noqa: BLE001 - re-raised on every rank below
        error = exc
    raise_on_any(comm, error, what)
