"""The command lines on a user's error: one line ``prog: error: ...``, printed once (by
rank 0 under mpiexec), exit status 2, no traceback; ``--debug`` shows the traceback."""
import gzip
import os
import subprocess
import sys

import pytest

from test_cli import ROOT, clean_env
from test_parareal_restart import environment

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
    "parareal --set": (["-m", "parareal", "run", "heat", "--set", "t_end"], "expected KEY=VALUE"),
    "parareal n=0": (["-m", "parareal", "run", "heat", "--set", "n=0"], "n must be an integer of at least 2"),
    "parareal unknown key": (["-m", "parareal", "run", "heat", "--set", "foo=1"], "has no parameter 'foo'"),
    "parareal --slices 0": (["-m", "parareal", "run", "heat", "--slices", "0"], "--slices 0: must be at least 1"),
    "parareal --output dir": (["-m", "parareal", "run", "heat", "--output", "."], "a directory"),
    "stencil --n 0": (["-m", "stencil", "run", "--n", "0"], "at least 3 points"),
    "stencil --output dir": (["-m", "stencil", "run", "--n", "8", "--output", "."], "a directory"),
}


def run(tmp_path, args, ranks=1):
    (tmp_path / JUNK).write_text("hello\n")
    prefix = ["mpiexec", "-n", str(ranks)] if ranks > 1 else []
    return subprocess.run(prefix + [sys.executable, *args], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120, env=dict(environment(), PYTHONPATH=ROOT))


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_user_error_is_one_line_and_status_2(tmp_path, case):
    args, fragment = CASES[case]
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
