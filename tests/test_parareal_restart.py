"""A Parareal run killed by SIGTERM resumes from its checkpoints to the identical result."""
import glob
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from test_cli import clean_env

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# about a second per fine run: long enough to be killed midway
RUN = ["-m", "parareal", "run", "burgers", "--set", "n=40", "t_end=1.0", "--iterations", "3"]
MODES = {"mpi": ["mpiexec", "-n", "4"], "threads": [], "serial": []}


def command(mode, *extra):
    prefix = MODES[mode]
    return prefix + [sys.executable] + RUN + ["--mode", mode, "--slices", "4", *extra]


def environment():
    """For a command under mpiexec on this machine: Open MPI allowed as root and
    oversubscribed; MPICH's Hydra told to meet its proxies over loopback (by default it
    looks up the host's name, which a minimal machine or a chroot may not resolve)."""
    env = clean_env()
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1", NUMBA_NUM_THREADS="1", HYDRA_IFACE="lo")
    return env


def load(path):
    data = np.load(path)
    return data["u_end"], json.loads(str(data["summary"]))


@pytest.mark.parametrize("mode", sorted(MODES))
def test_killed_run_resumes_to_the_identical_result(tmp_path, mode):
    env = environment()
    reference = tmp_path / "reference.npz"
    subprocess.run(command(mode, "--output", str(reference)), check=True, env=env, cwd=ROOT,
                   timeout=300, capture_output=True)

    checkpoints, resumed = tmp_path / "ckpt", tmp_path / "resumed.npz"
    proc = subprocess.Popen(command(mode, "--checkpoint", str(checkpoints), "--output", str(resumed)),
                            env=env, cwd=ROOT, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 240
    while not glob.glob(str(checkpoints / "slice*.it1.npz")):  # after an iteration or so
        assert proc.poll() is None, "the run ended before it could be killed"
        assert time.monotonic() < deadline
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGTERM)  # as a batch system's time limit does
    assert proc.wait(timeout=60) != 0
    assert not resumed.exists()
    # A kill can land inside a write: that leaves a temporary file (ignored on restart),
    # never a partial file under a checkpoint's name.
    saved = glob.glob(str(checkpoints / "slice*.npz"))
    assert saved
    for path in saved:
        with np.load(path, allow_pickle=False) as whole:   # every array reads back
            [whole[k] for k in whole.files]

    out = subprocess.run(command(mode, "--checkpoint", str(checkpoints), "--output", str(resumed)),
                         env=env, cwd=ROOT, timeout=300, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-3000:]
    u_ref, ref = load(reference)
    u, summary = load(resumed)
    assert summary["restarted_from"] >= 0, "the second run did not resume"
    assert "resumed after iteration" in out.stdout
    assert np.array_equal(u, u_ref)
    assert not glob.glob(str(checkpoints / "slice*.npz"))  # a finished run cleans up


@pytest.mark.parametrize("change,differs", [({"nu": 0.03}, "coarse_probe"), ({"slices": 2}, "slices"),
                                            ({"setup": "lorenz"}, "u0")])
def test_a_checkpoint_of_another_run_is_refused(tmp_path, change, differs):
    """Checkpoints know their run: another viscosity, another P or another setup is
    refused, naming what differs, instead of resuming into a wrong result."""
    from parareal import Checkpoint, PararealConfig, run_serial
    from parareal.setups import make_setup

    def run(setup="burgers", slices=4, **params):
        s = make_setup(setup, **({"n": 8, "t_end": 0.25, **params} if setup == "burgers" else params))
        config = PararealConfig(slices, s.t_end, 1)
        return run_serial(s.u0, s.coarse, s.fine, config, hooks=[Checkpoint(str(tmp_path), remove_at_end=False)])
    run()
    assert run().restarted_from == 1            # the same run resumes (serially too)
    with pytest.raises(ValueError, match=f"holds checkpoints of another run .*{differs}"):
        run(**change)


def test_stale_temporary_files_of_a_killed_writer_are_ignored(tmp_path):
    """A writer killed mid-write leaves ``<file>.<pid>.tmp``: never taken for a checkpoint."""
    from parareal import Checkpoint, PararealConfig, run_serial
    from parareal.setups import make_setup
    s = make_setup("lorenz")
    config = PararealConfig(4, s.t_end, 2)
    reference = run_serial(s.u0, s.coarse, s.fine, config)
    (tmp_path / "slice0.it2.npz.4711.tmp").write_bytes(b"half a file")
    result = run_serial(s.u0, s.coarse, s.fine, config, hooks=[Checkpoint(str(tmp_path))])
    assert result.restarted_from == -1 and np.array_equal(result.u_end, reference.u_end)


def test_a_planted_pickle_is_refused_not_run(tmp_path):
    """Checkpoint directories are shared: a pickle under a checkpoint's name is passed
    over with a warning naming it, never unpickled (it would run code)."""
    import pickle
    from parareal import Checkpoint, CheckpointWarning, PararealConfig, run_serial
    from parareal.setups import make_setup
    marker = tmp_path / "ran"
    s = make_setup("lorenz")
    config = PararealConfig(4, s.t_end, 2)
    (tmp_path / "slice0.it1.npz").write_bytes(pickle.dumps(_Planted(str(marker))))
    with pytest.warns(CheckpointWarning, match="slice0.it1.npz: not a checkpoint this package wrote"):
        result = run_serial(s.u0, s.coarse, s.fine, config, hooks=[Checkpoint(str(tmp_path))])
    assert not marker.exists()
    assert np.array_equal(result.u_end, run_serial(s.u0, s.coarse, s.fine, config).u_end)


def test_checkpoints_of_the_old_pickle_format_are_refused(tmp_path):
    from parareal import Checkpoint
    (tmp_path / "slice0.it1.pkl").write_bytes(b"anything")
    with pytest.raises(ValueError, match="old pickle format .*remove them"):
        Checkpoint(str(tmp_path))


class _Planted:
    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))
