"""Checkpoints of a long stencil run: each rank's owned layers every so many steps.

Files are ``step{n}.rank{r}.npy`` beside a ``run.json`` that names the run (grid shape,
stencil, partition), all written atomically.  A rank deletes its older files only after
every rank has written the newer ones, so a run killed at any instant leaves a complete
set to resume from: the latest step that every rank has saved.  Results do not depend on
how steps are grouped into passes, so a resumed run ends bit for bit where an
uninterrupted one does.
"""
import glob
import json
import os
import re

import numpy as np

from pipekrylov.atomic import atomic_write
from pipekrylov.parallel.errors import collective_check

__all__ = ["Checkpoint"]


class Checkpoint:
    """Save every ``every`` steps into ``directory``; resume from it.

    Parameters
    ----------
    directory : str
        Shared by all ranks of the run.
    every : int
        Steps between checkpoints (taken at the first pass end at or after each multiple).
    """

    def __init__(self, directory, every):
        if not isinstance(every, int) or every < 1:
            raise ValueError(f"checkpoint interval must be a positive integer, not {every!r}")
        self.directory, self.every = directory, every
        self.last = 0
        self.resumed_from = 0      # the step restore() found, for reports

    def _path(self, step, rank):
        return os.path.join(self.directory, f"step{step:09d}.rank{rank}.npy")

    def _steps(self, rank):
        found = (re.fullmatch(r"step(\d+)\.rank\d+\.npy", os.path.basename(p))
                 for p in glob.glob(os.path.join(self.directory, f"step*.rank{rank}.npy")))
        return {int(m.group(1)) for m in found if m}

    def restore(self, comm, identity, owned):
        """Put the latest complete checkpoint into ``owned``; return its step (0 if none).

        ``identity`` (a JSON-able dict) names the run; a directory holding another run's
        checkpoints raises ValueError on every rank.  Collective.
        """
        rank = comm.Get_rank()
        meta = os.path.join(self.directory, "run.json")
        with collective_check(comm, "checkpoint"):
            if rank == 0:
                os.makedirs(self.directory, exist_ok=True)
                if os.path.exists(meta):
                    with open(meta) as f:
                        saved = json.load(f)
                    if saved != identity:
                        differ = "; ".join(f"{k}: {saved.get(k)!r} there, {identity.get(k)!r} here"
                                           for k in sorted(set(saved) | set(identity))
                                           if saved.get(k) != identity.get(k))
                        raise ValueError(f"{self.directory} holds checkpoints of another run ({differ}): "
                                         "remove them or choose another directory")
                else:
                    atomic_write(meta, lambda f: json.dump(identity, f), mode="w")
        # a kill inside a write leaves this rank's temporary file: only this rank writes it
        for stale in glob.glob(os.path.join(self.directory, f"step*.rank{rank}.npy.*.tmp")):
            os.remove(stale)
        common = set.intersection(*comm.allgather(self._steps(rank)))
        step = max(common, default=0)
        if step:
            with collective_check(comm, "checkpoint"):
                saved = np.load(self._path(step, rank))
                if saved.shape != owned.shape:
                    raise ValueError(f"checkpoint {self._path(step, rank)} is {saved.shape}, "
                                     f"this rank owns {owned.shape}")
                owned[...] = saved
        self.last = self.resumed_from = step
        return step

    def maybe_save(self, comm, step, owned):
        """Save at ``step`` if ``every`` steps have passed since the last save.  Collective."""
        if step - self.last < self.every:
            return
        rank = comm.Get_rank()
        atomic_write(self._path(step, rank), lambda f: np.save(f, owned))
        comm.Barrier()      # every rank holds ``step`` before anyone drops an older one
        for old in self._steps(rank) - {step}:
            os.remove(self._path(old, rank))
        self.last = step
