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
import os
import sys
import time

__all__ = ["USER_ERRORS", "ArgumentParser", "add_debug_option", "check_output_path", "run_command"]

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


def check_output_path(path, kind):
    """``--output PATH`` must name a file in an existing folder: refused before the run
    rather than after it."""
    if os.path.isdir(path):
        raise ValueError(f"--output {path}: a directory; give a file path ({kind})")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise ValueError(f"--output {path}: the folder {folder} does not exist")


def add_debug_option(parser):
    parser.add_argument("--debug", action="store_true",
                        help="on an error, show Python's traceback instead of one line")


def run_command(body, prog, debug=False):
    """``body()``'s return value (an exit status), or 2 after a user error."""
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
