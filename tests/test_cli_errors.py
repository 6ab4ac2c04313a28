"""The command lines on a user's error: one line ``prog: error: ...``, printed once (by
rank 0 under mpiexec), exit status 2, no traceback; ``--debug`` shows the traceback."""
import gzip
import importlib.util
import os
import subprocess
import sys
import threading
import time

import pytest

from test_cli import ROOT, clean_env
from test_parareal_restart import environment

HAVE_PETSC = importlib.util.find_spec("petsc4py") is not None

JUNK = "junk.mtx"
CASES = {
    "matrix neither format": (["-m", "pipekrylov", "solve", "--matrix", JUNK], "neither a Matrix Market file"),
    "matrix missing": (["-m", "pipekrylov", "solve", "--matrix", "/nonexistent/a.mtx"], "No such file"),
    "method unknown": (["-m", "pipekrylov", "solve", "--method", "foo"], "invalid choice: 'foo'"),
    "method a generator": (["-m", "pipekrylov", "solve", "--method", "poisson2d"], "invalid choice: 'poisson2d'"),
    "problem size": (["-m", "pipekrylov", "solve", "--problem", "poisson2d:abc"], "N must be an integer"),
    "problem unknown": (["-m", "pipekrylov", "solve", "--problem", "foo:3"], "unknown problem 'foo'"),
    "depth 0": (["-m", "pipekrylov", "solve", "--method", "p-cg", "--depth", "0"], "positive integer"),
    "depth too deep": (["-m", "pipekrylov", "solve", "--method", "p-cg", "--depth", "40"], "from 1 to 16"),
    "depth for cg": (["-m", "pipekrylov", "solve", "--method", "cg", "--depth", "2"],
                     "--depth 2 is for p-cg (p(l)-CG) and p-gmres"),
    "ranks expected": (["-m", "pipekrylov", "solve", "--expect-ranks", "3"], "3 were requested"),
    "s for gmres": (["-m", "pipekrylov", "solve", "--method", "gmres", "--s", "3"], "--s 3 is for s-cg and s-gmres"),
    "parareal --set": (["-m", "parareal", "run", "heat", "--set", "t_end"], "expected KEY=VALUE"),
    "parareal n=0": (["-m", "parareal", "run", "heat", "--set", "n=0"], "n must be an integer of at least 2"),
    "parareal unknown key": (["-m", "parareal", "run", "heat", "--set", "foo=1"], "has no parameter 'foo'"),
    "parareal --slices 0": (["-m", "parareal", "run", "heat", "--slices", "0"], "--slices 0: must be at least 1"),
    "parareal --output dir": (["-m", "parareal", "run", "heat", "--output", "."], "a directory"),
    "stencil --n 0": (["-m", "stencil", "run", "--n", "0"], "at least 3 points"),
    "stencil --output dir": (["-m", "stencil", "run", "--n", "8", "--output", "."], "a directory"),
    # files whose header asks too much, or nothing, or whose bytes are broken
    "matrix header too large": (["-m", "pipekrylov", "solve", "--matrix", "huge.mtx"],
                                "huge.mtx: its header's 1000000000000 x 1000000000000 matrix with 1 entries "
                                "needs about"),
    "matrix 0x0": (["-m", "pipekrylov", "solve", "--matrix", "empty.mtx"], "empty.mtx: the matrix has no rows"),
    "matrix corrupt gzip": (["-m", "pipekrylov", "solve", "--matrix", "corrupt.mtx.gz"],
                            "corrupt.mtx.gz: corrupt gzip stream"),
    # options out of range
    "bench --repeat 0": (["-m", "pipekrylov", "bench", "--repeat", "0"], "--repeat 0: must be at least 1"),
    "model --max-ranks 0": (["-m", "pipekrylov", "model", "--max-ranks", "0"], "--max-ranks 0: must be at least 1"),
    "model --machine junk": (["-m", "pipekrylov", "model", "--machine", JUNK], f"{JUNK}: not a machine file"),
    "derive --replace-every 0": (["-m", "pipekrylov", "derive", "cg", "--replace-every", "0"],
                                 "--replace-every 0: must be at least 1"),
    "compare --pc foo": (["-m", "pipekrylov", "compare", "--pc", "foo"],
                         "--pc foo: not a preconditioner" if HAVE_PETSC else "it needs petsc4py"),
    "compare --depth 0": (["-m", "pipekrylov", "compare", "--depth", "0"], "--depth 0: must be at least 1"),
    "scaling collect nothing": (["-m", "pipekrylov", "scaling", "collect"], "name the records.jsonl files"),
    "scaling collect junk": (["-m", "pipekrylov", "scaling", "collect", JUNK], f"{JUNK}:1: not a JSON record"),
    "parareal nu=NaN": (["-m", "parareal", "run", "heat", "--set", "nu=NaN"], "nu must be a finite number, got nan"),
    "stencil --seed -1": (["-m", "stencil", "run", "--seed", "-1"], "--seed -1: must be at least 0"),
    # sizes beyond the machine's memory, refused before anything is allocated
    "problem too large": (["-m", "pipekrylov", "solve", "--problem", "poisson2d:200000"],
                          "--problem poisson2d:200000 (40000000000 unknowns) needs about"),
    "parareal n too large": (["-m", "parareal", "run", "heat", "--mode", "mpi", "--set", "n=1000000"],
                             "setup 'heat' with 1000000000000 unknowns"),
    "stencil --n too large": (["-m", "stencil", "run", "--n", "100000"], "--n 100000: the 100000^3 grid needs about"),
}

# Commands that start their own mpiexec: run serially only (under mpiexec they refuse to run)
LAUNCHING = {
    "scaling run --ranks 0": (["-m", "pipekrylov", "scaling", "run", "--ranks", "0"], "--ranks 0: must be at least 1"),
    "scaling --launcher {nprocs}": (["-m", "pipekrylov", "scaling", "run", "--launcher", "mpiexec -n {nprocs}"],
                                    "unknown placeholder {nprocs}; the known one is {ranks}"),
    "demo --output unwritable": (["-m", "pipekrylov", "demo", "--output", f"{JUNK}/demo"],
                                 f"--output {JUNK}/demo: could not write (Not a directory)"),
}


def run(tmp_path, args, ranks=1, **options):
    (tmp_path / JUNK).write_text("hello\n")
    (tmp_path / "huge.mtx").write_text("%%MatrixMarket matrix coordinate real general\n"
                                       "1000000000000 1000000000000 1\n1 1 1.0\n")
    (tmp_path / "empty.mtx").write_text("%%MatrixMarket matrix coordinate real general\n0 0 0\n")
    stream = gzip.compress(open(os.path.join(ROOT, "tests", "data", "nos4.mtx"), "rb").read())
    (tmp_path / "corrupt.mtx.gz").write_bytes(stream[:40] + b"x" * 24 + stream[64:])
    prefix = ["mpiexec", "-n", str(ranks)] if ranks > 1 else []
    return subprocess.run(prefix + [sys.executable, *args], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120, env=dict(environment(), PYTHONPATH=ROOT), **options)


@pytest.mark.parametrize("case", sorted(CASES) + sorted(LAUNCHING))
def test_a_user_error_is_one_line_and_status_2(tmp_path, case):
    args, fragment = {**CASES, **LAUNCHING}[case]
    out = run(tmp_path, args)
    assert out.returncode == 2, out.stderr
    lines = [line for line in out.stderr.splitlines() if "error" in line]
    assert len(lines) == 1 and fragment in lines[0], out.stderr
    assert "Traceback" not in out.stderr


@pytest.mark.parametrize("case", sorted(CASES))
def test_under_mpiexec_rank_0_alone_prints_it(tmp_path, case):
    args, fragment = CASES[case]
    out = run(tmp_path, args, ranks=2)
    assert out.returncode == 2, out.stderr
    assert sum(fragment in line for line in out.stderr.splitlines()) == 1, out.stderr
    assert "Traceback" not in out.stderr


def test_debug_shows_the_traceback(tmp_path):
    out = run(tmp_path, ["-m", "pipekrylov", "solve", "--matrix", JUNK, "--debug"])
    assert out.returncode != 0 and "Traceback" in out.stderr and "neither a Matrix Market" in out.stderr


@pytest.mark.parametrize("name", ["nos4.MTX", "nos4.mm", "nos4.mtx.gz", "nos4.petsc"])
def test_matrix_files_are_read_by_content(tmp_path, name):
    """Upper-case, other suffixes, gzipped, PETSc binary: the reader follows the bytes."""
    import numpy as np
    import scipy.io
    from pipekrylov.matrix import write_petsc_binary
    src = os.path.join(ROOT, "tests", "data", "nos4.mtx")
    path = tmp_path / name
    if name.endswith(".gz"):
        path.write_bytes(gzip.compress(open(src, "rb").read()))
    elif name.endswith(".petsc"):
        write_petsc_binary(str(path), scipy.io.mmread(src))
    else:
        path.write_bytes(open(src, "rb").read())
    out = subprocess.run([sys.executable, "-m", "pipekrylov", "solve", "--matrix", str(path), "--pc", "jacobi"],
                         capture_output=True, text=True, timeout=120, env=clean_env(), cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert f"cg on {name} (n=100, 1 ranks): converged_rtol" in out.stdout
    assert np.isfinite(float(out.stdout.split("true relative residual ")[1].split(",")[0]))


# ------------------------------------------------------------------ the user trial's failures
def error_lines(out):
    return [line for line in out.stderr.splitlines() if "error" in line]


@pytest.mark.parametrize("command", [["-m", "pipekrylov", "scaling", "run"], ["-m", "pipekrylov", "demo"]])
def test_commands_that_launch_mpiexec_refuse_to_run_under_it(tmp_path, command):
    out = run(tmp_path, command, ranks=2)
    assert out.returncode == 2, out.stderr
    lines = error_lines(out)
    assert len(lines) == 1 and "without mpiexec: it launches its own" in lines[0], out.stderr


def test_parareal_serial_mode_under_mpiexec_is_refused(tmp_path):
    out = run(tmp_path, ["-m", "parareal", "run", "lorenz", "--output", "out.npz"], ranks=3)
    assert out.returncode == 2, out.stderr
    lines = error_lines(out)
    assert len(lines) == 1 and "--mode serial under mpiexec (3 processes)" in lines[0], out.stderr
    assert not (tmp_path / "out.npz").exists()


def test_parareal_iterations_beyond_the_slices_are_bounded(tmp_path):
    """K = 10**9 once stored a K x P array before the first step; past P it changes nothing."""
    import numpy as np
    out = run(tmp_path, ["-m", "parareal", "run", "lorenz", "--iterations", "1000000000", "--output", "out.npz"])
    assert out.returncode == 0, out.stderr
    assert np.load(tmp_path / "out.npz")["changes"].shape == (4, 4)


# a wrapper that runs a module with a file size limit: writes beyond it fail with EFBIG,
# as on a full disk (SIGXFSZ ignored, or it would kill the process)
LIMITED = """import resource, runpy, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[1]), int(sys.argv[1])))
sys.argv = sys.argv[2:]
runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)
"""


@pytest.mark.parametrize("command,ranks", [
    # the limit leaves room for MPI's shared-memory files, not for the 35 MB grid
    (["stencil", "run", "--ndim", "2", "--n", "2100", "--steps", "1"], 1),
    (["stencil", "run", "--ndim", "2", "--n", "2100", "--steps", "1"], 2),
    (["parareal", "run", "lorenz"], 1)], ids=["stencil", "stencil-2-ranks", "parareal"])
def test_a_full_disk_names_the_output_file_on_every_rank(tmp_path, command, ranks):
    (tmp_path / "limited.py").write_text(LIMITED)
    limit = 1000 if command[0] == "parareal" else 30_000_000
    start = time.monotonic()
    out = run(tmp_path, ["limited.py", str(limit), *command, "--output", "out.data"], ranks=ranks)
    assert out.returncode == 2, out.stderr
    lines = error_lines(out)
    assert lines == [f"{command[0]}: error: --output out.data: could not write (File too large)"], out.stderr
    assert "Traceback" not in out.stderr and "Exception ignored" not in out.stderr
    assert time.monotonic() - start < 60     # not after a rank's deadline, alone
    assert not list(tmp_path.glob("out.data*"))    # neither the file nor its temporary


@pytest.mark.parametrize("ranks", [1, 2])
def test_a_matrix_from_a_fifo_is_read_once(tmp_path, ranks):
    """A FIFO (or a pipe, ``--matrix <(zcat a.mtx.gz)``) can be read once: rank 0 reads it."""
    fifo = tmp_path / "matrix.fifo"
    os.mkfifo(fifo)
    source = open(os.path.join(ROOT, "tests", "data", "nos4.mtx"), "rb").read()

    def write():
        with open(fifo, "wb") as f:    # waits for the reader
            f.write(gzip.compress(source))
    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    out = run(tmp_path, ["-m", "pipekrylov", "solve", "--matrix", fifo.name, "--pc", "jacobi"], ranks=ranks)
    assert out.returncode == 0, out.stderr
    assert f"cg on {fifo.name} (n=100, {ranks} ranks): converged_rtol" in out.stdout


def test_a_pipe_is_read_once(tmp_path):
    read, write = os.pipe()
    with open(os.path.join(ROOT, "tests", "data", "nos4.mtx"), "rb") as f:
        data = f.read()
    writer = threading.Thread(target=lambda: (os.write(write, data), os.close(write)), daemon=True)
    writer.start()
    out = run(tmp_path, ["-m", "pipekrylov", "solve", "--matrix", f"/dev/fd/{read}"], pass_fds=(read,))
    os.close(read)
    assert out.returncode == 0, out.stderr
    assert "converged_rtol" in out.stdout


def test_a_fifo_nothing_writes_to_is_refused(tmp_path):
    os.mkfifo(tmp_path / "matrix.fifo")
    out = run(tmp_path, ["-m", "pipekrylov", "solve", "--matrix", "matrix.fifo"])
    assert out.returncode == 2, out.stderr
    lines = error_lines(out)
    assert len(lines) == 1 and "matrix.fifo: a pipe or FIFO that nothing wrote to in 10 s" in lines[0], out.stderr


def test_compare_says_which_case_it_runs(tmp_path):
    """A whole table takes minutes: one line per case on stderr, as it starts."""
    pytest.importorskip("petsc4py")
    out = run(tmp_path, ["-m", "pipekrylov", "compare", "--n", "10", "--only", "cg", "--repeat", "1"])
    assert out.returncode == 0, out.stderr
    assert "compare: [1/2] PETSc cg ..." in out.stderr and "compare: [2/2] pipekrylov.petsc.CG ..." in out.stderr
