"""How the command lines end on a user's error: one line, once, status 2 (as argparse).

A command run under mpiexec raises the same error on every rank when the error is a
collective one (a bad file, a bad option: every rank checks the same thing), and the
ranks must not each print a traceback.  :func:`run_command` runs a command's body; on a
user error the ranks that failed meet (a nonblocking barrier with a deadline):

* all of them failed: rank 0 prints ``prog: error: <message>``, every rank exits with
  status 2;
* some rank never arrives (it is still computing, or waits in a collective the failing
  ranks left): each failing rank prints its error with its rank and aborts the job
  (status 2), so that nothing hangs.

``--debug`` keeps Python's traceback instead.
"""
import argparse
import errno
import io
import os
import sys
import time
import warnings
from contextlib import contextmanager

__all__ = ["USER_ERRORS", "ArgumentParser", "add_debug_option", "at_least", "check_output_path",
           "check_output_folder", "launcher_size", "output_errors", "refuse_nested_launch", "run_command",
           "write_output"]

# What a user's input or files raise (bad values, shapes, files, formats), as opposed to a
# bug, which keeps its traceback.
USER_ERRORS = (ValueError, TypeError, KeyError, OSError, ArithmeticError)
DEADLINE = float(os.environ.get("PIPEKRYLOV_ERROR_DEADLINE", "10"))


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser, whose usage errors only the launcher's rank 0 prints (every rank
    parses the same arguments, before MPI is started)."""

    def error(self, message):
        if _launcher_rank() > 0:
            sys.exit(2)
        super().error(message)


def _launcher_rank():
    for var in ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"):
        if os.environ.get(var, "").isdigit():
            return int(os.environ[var])
    return 0


def launcher_size():
    """The process count mpiexec (Open MPI's, MPICH's Hydra, srun's PMI) started this
    process among, 1 when it was not started by one.  (Not SLURM_NTASKS: a batch script
    has it set while it runs alone.)"""
    for var in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE"):
        if os.environ.get(var, "").isdigit():
            return int(os.environ[var])
    return 1


def refuse_nested_launch(command):
    """A command that starts its own mpiexec, itself run under mpiexec on several ranks,
    would run its whole study once per rank, each nesting jobs in the launcher's."""
    if launcher_size() > 1:
        raise ValueError(f"run `{command}` without mpiexec: it launches its own MPI jobs")


def at_least(minimum, **options):
    """Refuse an integer option below ``minimum``: ``at_least(1, repeat=args.repeat)``
    names ``--repeat`` (None: not given, nothing to check)."""
    for name, value in options.items():
        if value is not None and value < minimum:
            raise ValueError(f"--{name.replace('_', '-')} {value}: must be at least {minimum}")


def check_output_path(path, kind):
    """``--output PATH`` must name a file in an existing folder: refused before the run
    rather than after it."""
    if os.path.isdir(path):
        raise ValueError(f"--output {path}: a directory; give a file path ({kind})")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise ValueError(f"--output {path}: the folder {folder} does not exist")


def check_output_folder(path):
    """``--output FOLDER`` for files written after a long run: created (and so known to
    be writable) before the run."""
    with output_errors(path):
        os.makedirs(path, exist_ok=True)
        if not os.access(path, os.W_OK):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES))


@contextmanager
def output_errors(path):
    """An OSError in the block (a full disk, a quota, no permission) as one line naming
    ``--output`` and the file, not the operating system's words alone."""
    try:
        yield
    except OSError as exc:
        reason = os.strerror(exc.errno) if exc.errno else str(exc)
        raise OSError(f"--output {path}: could not write ({reason})") from exc


class _PlainFile:
    """A file numpy does not take for one: ``np.save`` writes to it through ``write()``,
    whose OSError carries errno (ENOSPC, EFBIG), not through ``ndarray.tofile()``, whose
    short write says only "N requested and M written"."""

    def __init__(self, f):
        self._f = f

    def __getattr__(self, name):
        method = getattr(self._f, name)
        if not callable(method):
            return method

        def call(*args, **kwargs):
            try:
                return method(*args, **kwargs)
            except OSError:
                # after the error (from a write, or a seek or flush that writes the
                # buffer), what the writer still does goes nowhere: numpy's savez leaves
                # its ZipFile open, and it closes itself when collected, after the file
                self._f = io.BytesIO()
                raise
        return call


def write_output(path, write, comm=None):
    """Write ``--output PATH`` on rank 0 by ``write(file)``, never half-written
    (:func:`~pipekrylov.files.atomic_write`).  A failure is raised on every rank of
    ``comm`` at once (the others wait for rank 0's verdict rather than exit and leave it
    alone), as ``OSError("--output PATH: could not write (<reason>)")``.  Collective."""
    from ..files import atomic_write
    error = None
    if comm is None or comm.Get_rank() == 0:
        try:
            with output_errors(path):
                atomic_write(path, lambda f: write(_PlainFile(f)))
        except OSError as exc:
            error = str(exc)
    if comm is not None and comm.Get_size() > 1:
        error = comm.bcast(error, root=0)
    if error:
        raise OSError(error)


def add_debug_option(parser):
    parser.add_argument("--debug", action="store_true",
                        help="on an error, show Python's traceback instead of one line")


def run_command(body, prog, debug=False):
    """``body()``'s return value (an exit status), or 2 after a user error.  Warnings
    print as one line, ``prog: warning: ...`` (a checkpoint passed over, say), not with
    the package's source line under them."""
    if not debug:
        warnings.showwarning = lambda message, category, *_: print(
            f"{prog}: warning: {message}", file=sys.stderr, flush=True)
    try:
        return body()
    except BrokenPipeError:  # output piped into head, say: stop quietly, as Unix tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except USER_ERRORS as exc:
        if debug:
            raise
        message = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
        return _fail(prog, message or type(exc).__name__)


def _fail(prog, message):
    comm = _world()
    if comm is None or comm.Get_size() == 1:
        if _launcher_rank() == 0:   # MPI not started: the launcher's rank 0 speaks for all
            print(f"{prog}: error: {message}", file=sys.stderr, flush=True)
        return 2
    request = comm.Ibarrier()
    deadline = time.monotonic() + DEADLINE
    while not request.Test():
        if time.monotonic() > deadline:
            print(f"{prog}: error on rank {comm.Get_rank()}: {message}", file=sys.stderr, flush=True)
            comm.Abort(2)
        time.sleep(0.001)
    if comm.Get_rank() == 0:
        print(f"{prog}: error: {message}", file=sys.stderr, flush=True)
    return 2


def _world():
    """COMM_WORLD if this process has started MPI, else None (a serial command)."""
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is None or not mpi.Is_initialized() or mpi.Is_finalized():
        return None
    return mpi.COMM_WORLD
