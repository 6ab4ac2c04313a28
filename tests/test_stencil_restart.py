"""A stencil run killed by SIGTERM resumes from its checkpoint to the identical grid."""
import glob
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from test_parareal_restart import environment

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUN = ["-m", "stencil", "run", "--ndim", "3", "--n", "128", "--steps", "4000", "--steps-per-pass", "4"]
LAUNCH = {1: [], 2: ["mpiexec", "-n", "2"]}


@pytest.mark.parametrize("ranks, scheduler, boundary", [
    (1, "blocked", "periodic"), (2, "blocked", "periodic"), (2, "tiles", "dirichlet")])
def test_killed_stencil_run_resumes_to_the_identical_grid(tmp_path, ranks, scheduler, boundary):
    env = environment()
    command = (LAUNCH[ranks] + [sys.executable] + RUN
               + ["--scheduler", scheduler, "--boundary", boundary])
    reference = tmp_path / "reference.npy"
    subprocess.run(command + ["--output", str(reference)], check=True, env=env, cwd=ROOT,
                   timeout=300, capture_output=True)

    checkpoints, resumed = tmp_path / "ckpt", tmp_path / "resumed.npy"
    resume = command + ["--checkpoint", str(checkpoints), "--checkpoint-every", "200",
                        "--output", str(resumed)]
    proc = subprocess.Popen(resume, env=env, cwd=ROOT, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 240
    # killed once every rank has written a checkpoint (the ranks write theirs one after
    # the other; a kill before the last would leave nothing to resume from)
    while not all(glob.glob(str(checkpoints / f"step*.rank{r}.npz")) for r in range(ranks)):
        assert proc.poll() is None, "the run ended before it could be killed"
        assert time.monotonic() < deadline
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGTERM)
    assert proc.wait(timeout=60) != 0
    assert not resumed.exists()
    for path in glob.glob(str(checkpoints / "step*.npz")):   # whole files only (a kill
        with np.load(path) as whole:                          # mid-write leaves a .tmp)
            whole["owned"]

    out = subprocess.run(resume, env=env, cwd=ROOT, timeout=300, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert np.array_equal(np.load(resumed), np.load(reference))
    resumed_from = int(out.stdout.split("resumed from the checkpoint of step ")[1].split()[0])
    assert 0 < resumed_from < 4000
    assert len(glob.glob(str(checkpoints / "step*.npz"))) == ranks   # older ones removed
    assert not glob.glob(str(checkpoints / "*.tmp"))                # stale temporaries too


@pytest.mark.parametrize("change,differs", [(["--seed", "1"], "another run (initial_crc32"),
                                            (["--steps", "20"], "beyond this run's 20 steps")])
def test_a_checkpoint_of_another_run_is_refused(tmp_path, change, differs):
    """Another seed (other initial data) or a checkpoint beyond the run's last step:
    refused, naming what differs, instead of returning the other run's grid.  (A run
    with more steps than the checkpoint's goes on from it.)"""
    base = [sys.executable, "-m", "stencil", "run", "--n", "12", "--steps", "40", "--checkpoint",
            str(tmp_path / "ckpt"), "--checkpoint-every", "10"]
    first = subprocess.run(base, env=environment(), cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert first.returncode == 0, first.stderr
    out = subprocess.run(base + change, env=environment(), cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and differs in out.stderr, out.stderr


def test_stale_temporary_files_of_a_killed_writer_are_removed(tmp_path):
    """A writer killed mid-write leaves ``<file>.<pid>.tmp``; the next run removes its own."""
    from stencil import Checkpoint, Stencil, advance
    u = np.random.default_rng(3).random((12, 12))
    stale = tmp_path / "step000000004.rank0.npz.4711.tmp"
    tmp_path.mkdir(exist_ok=True)
    stale.write_bytes(b"half an array")
    advance(u, Stencil.heat(2, 0.1), 8, checkpoint=Checkpoint(str(tmp_path), 4))
    assert not stale.exists() and not list(tmp_path.glob("*.tmp"))
