"""Hooks: monitoring and checkpointing attached to a controller without changing it.

A controller calls ``hook.after_iteration(time_slice)`` each time a slice finishes an
iteration (on the rank or thread that owns the slice) and ``hook.at_end(result, time_slices)`` once, with the slices it owns.
"""
import glob
import os
import re
import sys

import numpy as np

from pipekrylov.files import (CheckpointError, CheckpointWarning, bind_run, checkpoint_directory,
                              load_checked, reject, save_checked)

__all__ = ["Hook", "Checkpoint", "CheckpointWarning", "PrintDefects", "restart_iteration", "resume"]


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

    Files are ``slice{n}.it{k}.npz``: the state's arrays, its scalars as JSON, a checksum
    and the run's digest (:mod:`pipekrylov.files`: written atomically, read without
    pickle).  Every iteration's file is kept until the run ends: in the pipelined
    controllers slices run at different iterations, and a restart rolls all slices back to
    the last iteration that every unfinished slice has saved intact
    (:func:`restart_iteration`).  A file that fails its check is not resumed: a warning
    names it and the run goes back to the newest intact iteration, or starts over.  A run
    that completes removes its files.
    """

    def __init__(self, directory, remove_at_end=True):
        self.directory, self.remove_at_end = directory, remove_at_end
        checkpoint_directory(directory)
        legacy = sorted(glob.glob(os.path.join(directory, "slice*.it*.pkl")))
        if legacy:
            raise CheckpointError(
                f"{directory} holds checkpoints in the old pickle format ({os.path.basename(legacy[0])}, ...), "
                "which this version does not read (loading a pickle can run any code): remove them "
                "and run again from the start")
        self.run = None

    def _path(self, index, iteration):
        return os.path.join(self.directory, f"slice{index}.it{iteration}.npz")

    def bind(self, identity):
        """Tie the directory to the run ``identity`` (a JSON-able dict): the first run
        writes it to ``run.json``; a run with another identity is refused with what
        differs (resuming it would return the other run's values)."""
        self.run = bind_run(self.directory, identity)

    def after_iteration(self, s):
        state = s.state()
        arrays = {k: v for k, v in state.items() if isinstance(v, np.ndarray)}
        scalars = {k: v for k, v in state.items() if k not in arrays}
        scalars["changes"] = [[int(k), float(v)] for k, v in scalars["changes"].items()]
        save_checked(self._path(s.index, s.iteration), arrays, scalars, self.run)

    def saved(self, index):
        """``(iterations saved intact, ascending; whether the last had converged)``.

        Files that fail their check are left out, each with a warning naming it."""
        found = sorted(int(m.group(1)) for m in
                       (re.fullmatch(rf"slice{index}\.it(\d+)\.npz", os.path.basename(p))
                        for p in glob.glob(os.path.join(self.directory, f"slice{index}.it*.npz"))) if m)
        intact, converged = [], False
        for k in found:
            try:
                converged = self.load(index, k)["converged_at"] is not None
            except CheckpointError as exc:
                reject(exc)
                continue
            intact.append(k)
        return tuple(intact), converged

    def load(self, index, iteration):
        arrays, scalars = load_checked(self._path(index, iteration), self.run)
        scalars["changes"] = {k: v for k, v in scalars["changes"]}
        return {**scalars, **arrays}

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
    """The iteration every slice restarts from, given ``(intact iterations, converged)``
    per slice, or -1: start from the beginning.

    It is the latest iteration k that every slice can be put in: an unfinished slice must
    have saved k intact (pipelined slices may be at different iterations: all go back to
    a common one); a finished slice whose last state is not later than k restarts from
    that state.
    """
    def accepts(k, intact, converged):
        return k in intact or (converged and intact[-1] <= k)
    candidates = sorted({k for intact, _ in saved for k in intact}, reverse=True)
    return next((k for k in candidates if all(accepts(k, *s) for s in saved)), -1)


def resume(time_slice, checkpoint, iteration, intact):
    """Put ``time_slice`` in its saved state at ``iteration``, or at its last state if it
    finished earlier (see :func:`restart_iteration`); ``intact`` lists its intact files'
    iterations."""
    k = iteration if iteration in intact else intact[-1]
    time_slice.restore(checkpoint.load(time_slice.index, k))
