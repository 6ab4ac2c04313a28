"""Schedulers: who updates which layers of a slab when, during one pass of P steps.

* :class:`Sweep` is the non-blocked baseline: each step, the updated layers are split
  into one contiguous chunk per thread, and all threads finish the step before the next
  starts, so every step streams the whole grid through memory.
* :class:`PipelinedBlocking` is Wittmann, Hager & Wellein's pipelined temporal blocking:
  the layers are cut into blocks, thread ``s mod team`` does step ``s`` of the pass, and
  a thread takes block ``b`` at step ``s`` once step ``s-1`` has finished block ``b+1``.
  The team thus moves through the grid as a wavefront, each thread one step and two
  blocks behind its predecessor, while the blocks in between stay in the shared cache:
  a pass of P steps streams the grid once instead of P times.

Threads are Python threads running the GIL-free compiled layer kernel; progress counters
under one condition variable order them (a compiled loop spinning on a shared flag may
never see it change, and prange iterations need not run concurrently).  An exception in
any thread stops the team and is raised in the caller.
"""
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

__all__ = ["Sweep", "PipelinedBlocking"]


def _chunks(lo, hi, parts):
    return [(lo + (hi - lo) * p // parts, lo + (hi - lo) * (p + 1) // parts) for p in range(parts)]


@dataclass(frozen=True)
class Sweep:
    """Non-blocked: one step at a time over all layers, split among ``threads``.

    ``steps_per_pass`` is only the halo depth between exchanges on several processes.
    """
    threads: int = 2
    rows_per_block: int = 32
    steps_per_pass: int = 1

    def __post_init__(self):
        _positive(self, "threads", "rows_per_block", "steps_per_pass")

    def run_pass(self, slab, steps):
        if self.threads == 1:       # no hand-off: Parareal runs many of these side by side
            for step in range(steps):
                slab.update(step, *slab.update_range(step, steps), self.rows_per_block)
            slab.finish_pass(steps)
            return
        with ThreadPoolExecutor(self.threads) as pool:
            for step in range(steps):
                lo, hi = slab.update_range(step, steps)
                work = [pool.submit(slab.update, step, k0, k1, self.rows_per_block)
                        for k0, k1 in _chunks(lo, hi, self.threads) if k1 > k0]
                for w in work:
                    w.result()
        slab.finish_pass(steps)


@dataclass(frozen=True)
class PipelinedBlocking:
    """Pipelined temporal blocking by a team of threads (see the module docstring).

    Parameters
    ----------
    team : int
        Threads in the team; thread ``t`` does steps ``t, t + team, ...`` of each pass.
    block : int
        Layers per block (planes in 3D, rows in 2D).
    steps_per_pass : int
        Steps taken per sweep of the wavefront through the grid (the memory traffic is
        divided by it); also the ghost depth on several processes.
    rows_per_block : int
        Rows of a 3D plane taken together (L2 blocking inside the kernel).
    """
    team: int = 2
    block: int = 4
    steps_per_pass: int = 4
    rows_per_block: int = 32

    def __post_init__(self):
        _positive(self, "team", "block", "steps_per_pass", "rows_per_block")

    def run_pass(self, slab, steps):
        nblocks = -(-(slab.nlayers - 2) // self.block)
        done = [0] * steps              # blocks finished per step
        state = threading.Condition()
        failed = []

        def blocks_of(step):
            lo, hi = slab.update_range(step, steps)
            for b in range(nblocks):
                k0 = max(lo, 1 + b * self.block)
                k1 = min(hi, 1 + (b + 1) * self.block)
                yield b, k0, k1

        def worker(first):
            # This thread's steps, block by block, in wavefront order: step s reaches
            # block b at "time" b + 2s, so a thread with several steps interleaves them.
            tasks = sorted((b + 2 * s, s, b, k0, k1) for s in range(first, steps, self.team)
                           for b, k0, k1 in blocks_of(s))
            try:
                for _, s, b, k0, k1 in tasks:
                    if s > 0:
                        with state:
                            state.wait_for(lambda: failed or done[s - 1] >= min(b + 2, nblocks))
                            if failed:
                                return
                    if k1 > k0:
                        slab.update(s, k0, k1, self.rows_per_block)
                    with state:
                        done[s] += 1
                        state.notify_all()
            except BaseException as error:      # stop the team, report in the caller
                with state:
                    failed.append(error)
                    state.notify_all()

        team = [threading.Thread(target=worker, args=(t,), daemon=True)
                for t in range(min(self.team, steps))]
        for t in team:
            t.start()
        for t in team:
            t.join()
        if failed:
            raise failed[0]
        slab.finish_pass(steps)


def _positive(params, *names):
    for name in names:
        value = getattr(params, name)
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{type(params).__name__}.{name} must be a positive integer, not {value!r}")
