"""Hooks: monitoring and checkpointing attached to a controller without changing it.

A controller calls ``hook.after_iteration(time_slice)`` each time a slice finishes an
iteration (on the rank or thread that owns the slice) and ``hook.at_end(result, time_slices)`` once, with the slices it owns.
"""
import glob
import json
import os
import sys

import numpy as np

from pipekrylov.atomic import atomic_write

__all__ = ["Hook", "Checkpoint", "PrintDefects", "restart_iteration", "resume"]


class Hook:
    def after_iteration(self, time_slice):
        pass

    def at_end(self, result, time_slices):
        pass


class PrintDefects(Hook):
    """Print each slice's change per iteration as it happens (``slice n iteration k ...``)."""

    def __init__(self, stream=None):
        self.stream = stream or sys.stdout

    def after_iteration(self, s):
        change = s.changes.get(s.iteration)
        text = "prediction" if change is None else f"change {change:.3e}"
        mark = " converged" if s.converged_at == s.iteration else ""
        print(f"slice {s.index:3d} iteration {s.iteration:2d} {text}{mark}", file=self.stream, flush=True)


class Checkpoint(Hook):
    """Write each slice's state after every iteration to ``directory``; restore it.

    Files are ``slice{n}.it{k}.npz`` (the state's arrays, and its scalars as JSON: numpy
    reads them without pickle, so a file planted in a shared directory cannot run code),
    written to a temporary name and renamed, so a run
    killed at any instant leaves only whole files.  Every iteration's file is kept until
    the run ends: in the pipelined controllers slices run at different iterations, and a
    restart rolls all slices back to the last iteration that every unfinished slice has
    saved (:func:`restart_iteration`).  A run that completes removes its files.
    """

    def __init__(self, directory, remove_at_end=True):
        self.directory, self.remove_at_end = directory, remove_at_end
        os.makedirs(directory, exist_ok=True)

    def _path(self, index, iteration):
        return os.path.join(self.directory, f"slice{index}.it{iteration}.npz")

    def bind(self, identity):
        """Tie the directory to the run ``identity`` (a JSON-able dict): the first run
        writes it to ``run.json``; a run with another identity is refused with what
        differs (resuming it would return the other run's values)."""
        path = os.path.join(self.directory, "run.json")
        if os.path.exists(path):
            with open(path) as f:
                saved = json.load(f)
            if saved != identity:
                differ = "; ".join(f"{k}: {saved.get(k)!r} there, {identity.get(k)!r} here"
                                   for k in sorted(set(saved) | set(identity)) if saved.get(k) != identity.get(k))
                raise ValueError(f"{self.directory} holds checkpoints of another run ({differ}): "
                                 "remove them or choose another directory")
        else:
            atomic_write(path, lambda f: json.dump(identity, f), mode="w")

    def after_iteration(self, s):
        state = s.state()
        arrays = {k: v for k, v in state.items() if isinstance(v, np.ndarray)}
        scalars = {k: v for k, v in state.items() if k not in arrays}
        scalars["changes"] = [[int(k), float(v)] for k, v in scalars["changes"].items()]
        text = json.dumps(scalars, default=lambda v: v.item())   # numpy scalars as Python's
        atomic_write(self._path(s.index, s.iteration), lambda f: np.savez(f, scalars=np.array(text), **arrays))

    def saved(self, index):
        """``(last iteration saved, whether that state had converged)``, or ``(-1, False)``."""
        iterations = sorted(int(p.rsplit(".it", 1)[1][:-4])
                            for p in glob.glob(os.path.join(self.directory, f"slice{index}.it*.npz")))
        if not iterations:
            return -1, False
        return iterations[-1], self.load(index, iterations[-1])["converged_at"] is not None

    def load(self, index, iteration):
        path = self._path(index, iteration)
        try:
            with np.load(path, allow_pickle=False) as saved:
                state = {k: saved[k] for k in saved.files if k != "scalars"}
                scalars = json.loads(str(saved["scalars"]))
        except (ValueError, OSError, KeyError) as exc:   # a pickle, a foreign or broken file
            raise ValueError(f"{path} is not a checkpoint this package wrote ({exc}): remove it") from None
        scalars["changes"] = {k: v for k, v in scalars["changes"]}
        return {**scalars, **state}

    def at_end(self, result, time_slices):
        if self.remove_at_end:
            for s in time_slices:
                for path in glob.glob(os.path.join(self.directory, f"slice{s.index}.it*.npz")):
                    os.remove(path)
            if time_slices and time_slices[-1].index == len(result.converged_at) - 1:
                # the process holding the last slice closes the run (its files are gone)
                run = os.path.join(self.directory, "run.json")
                if os.path.exists(run):
                    os.remove(run)


def restart_iteration(saved):
    """The iteration every slice restarts from, given ``(last, converged)`` per slice.

    Unfinished slices may have saved different iterations (pipelining): all restart from
    the smallest.  A finished slice restarts from its last state if that is not later.
    Returns -1 when some unfinished slice saved nothing (start from the beginning).
    """
    unfinished = [last for last, converged in saved if not converged]
    if not unfinished:
        return max(last for last, _ in saved)
    return min(unfinished)


def resume(time_slice, checkpoint, iteration):
    """Put ``time_slice`` in its saved state at ``min(iteration, its last)``."""
    last, _ = checkpoint.saved(time_slice.index)
    k = min(iteration, last)
    if k >= 0:
        time_slice.restore(checkpoint.load(time_slice.index, k))
