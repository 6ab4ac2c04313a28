"""Checkpoints that cannot be trusted are never resumed, and a failed write stops the run.

Parareal's and the stencil's checkpoints, damaged as a shared file system or a killed job
can damage them: a flipped byte in the data or in a header, a valid file whose data was
changed, a truncated or empty file, another run's file under the right name.  Each is
passed over with a warning naming it, and the run resumes from an older intact checkpoint
(or starts over) to the same result as a run that was never interrupted.  Serially and,
marked ``mpi``, at 2 and 4 ranks (one rank's file damaged).
"""
import glob
import os
import resource
import signal
import warnings
from contextlib import contextmanager

import numpy as np
import pytest

import parareal
import stencil
from parareal.setups import make_setup
from pipekrylov.files import CheckpointError, CheckpointWarning, load_checked, save_checked

DAMAGES = ["data byte", "header byte", "rewritten", "truncated", "empty", "another run"]


def damage(path, how, other_run_file=None):
    """Damage the checkpoint ``path`` in place."""
    raw = bytearray(open(path, "rb").read())
    if how in ("data byte", "header byte"):
        with np.load(path) as f:
            data = max((f[k] for k in f.files if k != "__meta__"), key=lambda a: a.nbytes)
        at = raw.find(data.tobytes()) + data.nbytes // 2 if how == "data byte" else raw.find(b"'descr'") + 2
        raw[at] ^= 0x10
    elif how == "rewritten":    # a valid npz whose values were changed: only the checksum tells
        with np.load(path) as f:
            entries = {k: f[k] for k in f.files}
        name = max((k for k in entries if k != "__meta__"), key=lambda k: entries[k].nbytes)
        entries[name] = entries[name] + 1.0
        with open(path, "wb") as out:
            np.savez(out, **entries)
        return
    elif how == "truncated":
        raw = raw[:len(raw) // 2]
    elif how == "empty":
        raw = b""
    elif how == "another run":
        raw = open(other_run_file, "rb").read()
    open(path, "wb").write(raw)


def test_a_checked_file_reads_back_and_rejects_its_damage(tmp_path):
    path = str(tmp_path / "a.npz")
    arrays = {"u": np.linspace(0, 1, 50), "k": np.arange(3), "s": np.array(2.5)}
    save_checked(path, arrays, {"step": 7, "name": "x"}, run="r1")
    loaded, meta = load_checked(path, "r1")
    assert meta == {"step": 7, "name": "x"} and all(np.array_equal(loaded[k], arrays[k]) for k in arrays)
    with pytest.raises(CheckpointError, match="another run"):
        load_checked(path, "r2")
    for how in DAMAGES[:-1]:
        save_checked(path, arrays, {"step": 7}, run="r1")
        damage(path, how)
        with pytest.raises(CheckpointError, match=f"{path}: (corrupt|not a checkpoint)"):
            load_checked(path, "r1")


# ---- Parareal -------------------------------------------------------------------------

def lorenz_run(directory, comm=None):
    s = make_setup("lorenz")
    slices = 4 if comm is None else comm.size
    config = parareal.PararealConfig(slices, s.t_end, min(3, slices - 1))
    hooks = [] if directory is None else [parareal.Checkpoint(directory, remove_at_end=False)]
    if comm is None:
        return parareal.run_serial(s.u0, s.coarse, s.fine, config, hooks=hooks)
    return parareal.run_mpi(s.u0, s.coarse, s.fine, config, comm=comm, hooks=hooks)


def other_parareal_file(tmp, name, comm=None):
    """``name`` as written by a run of another problem (other initial values)."""
    s = make_setup("lorenz")
    slices = 4 if comm is None else comm.size
    config = parareal.PararealConfig(slices, s.t_end, min(3, slices - 1))
    parareal.run_serial(s.u0 + 1.0, s.coarse, s.fine, config,
                        hooks=[parareal.Checkpoint(tmp, remove_at_end=False)])
    return os.path.join(tmp, name)


@pytest.mark.parametrize("how", DAMAGES)
def test_a_damaged_parareal_checkpoint_is_passed_over(tmp_path, how):
    directory = str(tmp_path / "ckpt")
    reference = lorenz_run(None)
    lorenz_run(directory)
    undamaged = lorenz_run(directory).restarted_from
    bad = os.path.join(directory, f"slice3.it{undamaged}.npz")     # the last slice's newest
    other = other_parareal_file(str(tmp_path / "other"), os.path.basename(bad)) if how == "another run" else None
    damage(bad, how, other)
    with pytest.warns(CheckpointWarning, match=f"{bad}: .*not resumed"):
        result = lorenz_run(directory)
    assert result.restarted_from < undamaged
    assert np.array_equal(result.u_end, reference.u_end)


@pytest.mark.mpi
@pytest.mark.parametrize("how", ["data byte", "truncated", "another run"])
def test_a_damaged_parareal_checkpoint_is_passed_over_under_mpi(comm, tmp_path_factory, how):
    directory = comm.bcast(str(tmp_path_factory.mktemp("ckpt")) if comm.rank == 0 else None)
    reference = lorenz_run(None, comm)
    lorenz_run(directory, comm)
    undamaged = lorenz_run(directory, comm).restarted_from
    last = comm.size - 1
    bad = os.path.join(directory, f"slice{last}.it{undamaged}.npz")
    if comm.rank == last:
        other = (other_parareal_file(str(tmp_path_factory.mktemp("other")), os.path.basename(bad), comm)
                 if how == "another run" else None)
        damage(bad, how, other)
    comm.Barrier()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = lorenz_run(directory, comm)
    named = [str(w.message) for w in caught if issubclass(w.category, CheckpointWarning)]
    assert (named == [f"{bad}: " + named[0].split(": ", 1)[1]]) if comm.rank == last else not named
    assert result.restarted_from < undamaged
    assert np.array_equal(result.u_end, reference.u_end)


# ---- stencil --------------------------------------------------------------------------

def heat_grid(comm):
    """This rank's layers of a 40 x 16 grid."""
    u = np.random.default_rng(5).random((40, 16))
    if comm is None:
        return u
    p = stencil.distributed.layer_partition(comm, u.shape[0])
    return u[p.start:p.end].copy()


def heat_run(directory, steps, comm=None, seed_shift=0.0):
    checkpoint = None if directory is None else stencil.Checkpoint(directory, 4)
    u = stencil.advance(heat_grid(comm) + seed_shift, stencil.Stencil.heat(2, 0.1), steps,
                        scheduler=stencil.Sweep(steps_per_pass=4), comm=comm, checkpoint=checkpoint)
    return u, checkpoint


@pytest.mark.parametrize("how", DAMAGES)
def test_a_damaged_stencil_checkpoint_is_passed_over(tmp_path, how):
    directory = str(tmp_path / "ckpt")
    reference, _ = heat_run(None, 12)
    heat_run(directory, 8)
    (bad,) = glob.glob(os.path.join(directory, "step*.rank0.npz"))
    other = None
    if how == "another run":
        heat_run(str(tmp_path / "other"), 8, seed_shift=1.0)
        other = os.path.join(tmp_path / "other", os.path.basename(bad))
    damage(bad, how, other)
    with pytest.warns(CheckpointWarning, match=f"{bad}: .*not resumed"):
        u, checkpoint = heat_run(directory, 12)
    assert checkpoint.resumed_from == 0          # its only checkpoint was bad: from the start
    assert np.array_equal(u, reference)


@pytest.mark.mpi
@pytest.mark.parametrize("how", ["header byte", "rewritten", "empty"])
def test_a_damaged_stencil_checkpoint_is_passed_over_under_mpi(comm, tmp_path_factory, how):
    directory = comm.bcast(str(tmp_path_factory.mktemp("ckpt")) if comm.rank == 0 else None)
    reference, _ = heat_run(None, 12, comm)
    heat_run(directory, 8, comm)
    _, checkpoint = heat_run(directory, 8, comm)
    assert checkpoint.resumed_from == 8
    last = comm.size - 1
    if comm.rank == last:
        (bad,) = glob.glob(os.path.join(directory, f"step*.rank{last}.npz"))
        damage(bad, how)
    comm.Barrier()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        u, checkpoint = heat_run(directory, 12, comm)
    rejected = [w for w in caught if issubclass(w.category, CheckpointWarning)]
    assert len(rejected) == (comm.rank == last)
    assert checkpoint.resumed_from == 0          # every rank starts over with the damaged one
    assert np.array_equal(u, reference)


# ---- full disks, files where directories belong ---------------------------------------

@contextmanager
def file_size_limit(nbytes):
    """Writes beyond ``nbytes`` fail with EFBIG, as on a full disk or an exhausted quota."""
    old = resource.getrlimit(resource.RLIMIT_FSIZE)
    handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (nbytes, old[1]))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, old)
        signal.signal(signal.SIGXFSZ, handler)


def no_partial_files(directory):
    return not glob.glob(os.path.join(directory, "*.tmp"))


@pytest.mark.mpi
def test_a_full_disk_stops_a_parareal_run_on_every_rank(comm, tmp_path_factory):
    directory = comm.bcast(str(tmp_path_factory.mktemp("ckpt")) if comm.rank == 0 else None)
    full = comm.size - 1            # the rank whose disk is full
    with file_size_limit(1000) if comm.rank == full else _nothing():
        with pytest.raises(OSError, match=rf"could not write {directory}/slice{full}\.it0\.npz: File too large"):
            lorenz_run(directory, None if comm.size == 1 else comm)
    comm.Barrier()
    assert not os.path.exists(os.path.join(directory, f"slice{full}.it0.npz"))
    assert no_partial_files(directory)


@pytest.mark.mpi
def test_a_full_disk_stops_a_stencil_run_on_every_rank(comm, tmp_path_factory):
    directory = comm.bcast(str(tmp_path_factory.mktemp("ckpt")) if comm.rank == 0 else None)
    full = comm.size - 1
    with file_size_limit(1000) if comm.rank == full else _nothing():
        with pytest.raises(OSError, match=rf"could not write {directory}/step\d+\.rank{full}\.npz: File too large"):
            heat_run(directory, 8, comm)
    comm.Barrier()
    assert not glob.glob(os.path.join(directory, f"*rank{full}.npz"))
    assert no_partial_files(directory)


@contextmanager
def _nothing():
    yield


def test_a_file_where_the_checkpoint_directory_belongs(tmp_path):
    path = tmp_path / "ckpt"
    path.write_text("")
    with pytest.raises(NotADirectoryError, match="ckpt is a file: give a directory"):
        parareal.Checkpoint(str(path))
    with pytest.raises(NotADirectoryError, match="ckpt is a file: give a directory"):
        heat_run(str(path), 8)


@pytest.mark.parametrize("text", ["", "{not json", "[1, 2]"])
def test_a_garbage_run_description_is_named(tmp_path, text):
    (tmp_path / "run.json").write_text(text)
    with pytest.raises(ValueError, match="run.json is not a run description this package wrote"):
        lorenz_run(str(tmp_path))
    with pytest.raises(ValueError, match="run.json is not a run description this package wrote"):
        heat_run(str(tmp_path), 8)


def test_nothing_the_package_reads_can_run_code():
    """No pickle.load, eval or exec on file contents anywhere in the repository."""
    import re
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    pattern = re.compile(r"\b(pickle\.loads?|cPickle|marshal\.loads?|shelve\.open|eval|exec)\s*\(|allow_pickle\s*=\s*True")
    found = []
    for folder in ("pipekrylov", "parareal", "stencil", "tools", "benchmarks", "jobs"):
        for path in glob.glob(os.path.join(root, folder, "**", "*.py"), recursive=True):
            for number, line in enumerate(open(path), 1):
                if pattern.search(line.split("#")[0]):
                    found.append(f"{os.path.relpath(path, root)}:{number}: {line.strip()}")
    assert not found, "\n".join(found)


def test_the_command_line_names_the_damaged_file_in_one_line(tmp_path):
    import subprocess
    import sys
    from test_parareal_restart import environment
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    run = [sys.executable, "-m", "stencil", "run", "--n", "12", "--steps", "40", "--checkpoint",
           str(tmp_path), "--checkpoint-every", "10"]
    first = subprocess.run(run + ["--steps", "20"], env=environment(), cwd=root, capture_output=True,
                           text=True, timeout=120)
    assert first.returncode == 0, first.stderr
    (bad,) = glob.glob(str(tmp_path / "step*.rank0.npz"))
    damage(bad, "truncated")
    out = subprocess.run(run, env=environment(), cwd=root, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert f"stencil: warning: {bad}: not a checkpoint this package wrote" in out.stderr
    assert "not resumed" in out.stderr and "resumed from the checkpoint" not in out.stdout
