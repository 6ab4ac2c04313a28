"""Checkpoints of a long stencil run: each rank's owned layers every so many steps.

Files are ``step{n}.rank{r}.npz`` beside a ``run.json`` that names the run (grid shape,
stencil, partition), written atomically, checksummed and read without pickle
(:mod:`pipekrylov.files`).  A rank deletes its older files only after every rank has
written the newer ones, so a run killed at any instant leaves a complete set to resume
from: the latest step that every rank has saved intact.  A file that fails its check is
not resumed: a warning names it, and the run resumes from an older complete set or starts
over.  Results do not depend on how steps are grouped into passes, so a resumed run ends
bit for bit where an uninterrupted one does.
"""
import glob
import os
import re

from pipekrylov.files import (CheckpointError, CheckpointWarning, bind_run, checkpoint_directory,
                              load_checked, reject, run_digest, save_checked)
from pipekrylov.parallel.errors import collective_check, raise_on_any

__all__ = ["Checkpoint", "CheckpointWarning"]


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
        self.run = None

    def _path(self, step, rank):
        return os.path.join(self.directory, f"step{step:09d}.rank{rank}.npz")

    def _steps(self, rank):
        found = (re.fullmatch(r"step(\d+)\.rank\d+\.npz", os.path.basename(p))
                 for p in glob.glob(os.path.join(self.directory, f"step*.rank{rank}.npz")))
        return {int(m.group(1)) for m in found if m}

    def _load(self, step, rank, shape):
        arrays, _ = load_checked(self._path(step, rank), self.run)
        owned = arrays.get("owned")
        if owned is None or owned.shape != shape:
            raise CheckpointError(f"{self._path(step, rank)}: holds {None if owned is None else owned.shape}, "
                                  f"this rank owns {shape}")
        return owned

    def restore(self, comm, identity, owned):
        """Put the latest complete checkpoint into ``owned``; return its step (0 if none).

        ``identity`` (a JSON-able dict) names the run; a directory holding another run's
        checkpoints raises ValueError on every rank.  Collective.
        """
        rank = comm.Get_rank()
        with collective_check(comm, "checkpoint"):
            if rank == 0:
                checkpoint_directory(self.directory)
                bind_run(self.directory, identity)
        self.run = run_digest(identity)       # identity is the same on every rank
        # a kill inside a write leaves this rank's temporary file: only this rank writes it
        for stale in glob.glob(os.path.join(self.directory, f"step*.rank{rank}.npz.*.tmp")):
            os.remove(stale)
        intact = set()
        for step in sorted(self._steps(rank), reverse=True):
            try:
                self._load(step, rank, owned.shape)
                intact.add(step)
            except CheckpointError as exc:
                reject(exc)
        step = max(set.intersection(*comm.allgather(intact)), default=0)
        if step:
            owned[...] = self._load(step, rank, owned.shape)
        self.last = self.resumed_from = step
        return step

    def maybe_save(self, comm, step, owned):
        """Save at ``step`` if ``every`` steps have passed since the last save.  Collective:
        a rank that cannot write (a full disk) stops every rank, naming its file."""
        if step - self.last < self.every:
            return
        rank = comm.Get_rank()
        error = None
        try:
            save_checked(self._path(step, rank), {"owned": owned}, {"step": step}, self.run)
        except OSError as exc:
            error = exc
        # every rank holds ``step`` before anyone drops an older one
        raise_on_any(comm, error, "checkpoint")
        for old in self._steps(rank) - {step}:
            os.remove(self._path(old, rank))
        self.last = step
