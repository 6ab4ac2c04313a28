"""``python -m stencil run``: a heat-equation run from a batch script, on one or more ranks.

    mpiexec -n 4 python -m stencil run --ndim 3 --n 256 --steps 1000 --scheduler blocked \\
        --checkpoint ckpt --checkpoint-every 100 --output final.npy

Each rank builds its own layers of the initial grid (random values seeded per layer, so
the grid does not depend on the rank count).  A run killed midway and started again with
the same arguments resumes from its last checkpoint and writes the identical result.
"""
import time

import numpy as np
from mpi4py import MPI

from pipekrylov.kernels.compile import compiling_notice
from pipekrylov.memory import check_memory
from pipekrylov.parallel.commandline import (ArgumentParser, add_debug_option, at_least, check_output_path,
                                             run_command, write_output)

from .checkpoint import Checkpoint
from .distributed import gather_layers, layer_partition
from .run import advance
from .schedulers import PipelinedBlocking, Sweep, WavefrontTiles
from .spec import BOUNDARIES, Stencil
from .tuning import autotune, candidates


def initial_layers(shape, start, end, seed):
    """Layers ``start:end`` of the initial grid: uniform random values, seeded per layer."""
    return np.array([np.random.default_rng([seed, k]).random(shape[1:]) for k in range(start, end)])


def make_scheduler(args, local_shape, stencil):
    if args.scheduler == "sweep":
        return Sweep(args.threads, steps_per_pass=args.steps_per_pass, streaming_stores=args.streaming_stores)
    if args.scheduler == "blocked":
        return PipelinedBlocking(args.threads, args.block, args.steps_per_pass)
    if args.scheduler == "tiles":
        return WavefrontTiles(args.threads, args.tile, args.steps_per_pass)
    best, _ = autotune(local_shape, stencil, candidates(args.threads, ndim=args.ndim))
    return best


def run(args, comm):
    shape = (args.n,) * args.ndim
    part = layer_partition(comm, shape[0])
    u = initial_layers(shape, part.start, part.end, args.seed)
    stencil = Stencil.heat(args.ndim, args.c, args.boundary)
    scheduler = make_scheduler(args, u.shape, stencil)
    rank0 = comm.Get_rank() == 0
    if rank0:
        print(f"{stencil.describe()} on {args.n}^{args.ndim}, {comm.Get_size()} rank(s), {scheduler}",
              flush=True)

    def monitor(step, owned):
        top = comm.allreduce(float(np.abs(owned).max()), op=MPI.MAX)
        if rank0:
            print(f"step {step:6d}  max|u| {top:.12e}", flush=True)
    checkpoint = Checkpoint(args.checkpoint, args.checkpoint_every) if args.checkpoint else None
    if args.steps:   # compiling is not computing: one untimed pass on a copy first
        with compiling_notice(rank0):
            advance(u.copy(), stencil, min(args.steps, scheduler.steps_per_pass), scheduler=scheduler, comm=comm)
    comm.Barrier()
    start = time.perf_counter()
    result = advance(u, stencil, args.steps, scheduler=scheduler, comm=comm,
                     checkpoint=checkpoint, callback=monitor if args.monitor else None)
    seconds = comm.allreduce(time.perf_counter() - start, op=MPI.MAX)
    grid = gather_layers(comm, result) if args.output else None
    total = comm.allreduce(float(result.sum()))
    if rank0 and checkpoint is not None and checkpoint.resumed_from:
        print(f"resumed from the checkpoint of step {checkpoint.resumed_from}")
    if rank0:
        # a resumed run did only the steps after its checkpoint
        done = args.steps - (checkpoint.resumed_from if checkpoint is not None and checkpoint.resumed_from else 0)
        updates = np.prod([n - (0 if stencil.periodic else 2) for n in shape]) * done
        rate = f"{updates / seconds / 1e6:.0f} MLUP/s including setup" if done > 0 else "no steps to take"
        print(f"{done} steps in {seconds:.3f} s ({rate}); sum(u) = {total:.15e}")
    if args.output:
        write_output(args.output, lambda f: np.save(f, grid), comm)


def check(args):
    """What can be refused before anything runs."""
    if args.n < 3:
        raise ValueError(f"--n {args.n}: at least 3 points per axis (two of them boundary)")
    if args.steps < 0:
        raise ValueError(f"--steps {args.steps}: must not be negative")
    at_least(1, threads=args.threads, steps_per_pass=args.steps_per_pass, block=args.block,
             checkpoint_every=args.checkpoint_every)
    at_least(0, seed=args.seed)
    if args.output:
        check_output_path(args.output, "NPY")


def check_memory_of(args, comm):
    """Refuse a grid too large for the machine before it is built: each rank holds its
    layers about six times (the initial grid, the untimed pass's copy, the slab's two
    buffers with their halos, the result); rank 0 also gathers the whole grid for
    --output.  Collective."""
    grid = 8 * args.n ** args.ndim
    check_memory(f"--n {args.n}: the {args.n}^{args.ndim} grid", 6 * grid / comm.Get_size(), comm,
                 once=grid if args.output else 0)


def main(argv=None):
    parser = ArgumentParser(prog="python -m stencil", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="advance a heat-equation grid")
    r.add_argument("--ndim", type=int, choices=(2, 3), default=3)
    r.add_argument("--n", type=int, default=64, help="points per axis, boundary included")
    r.add_argument("--steps", type=int, default=100)
    r.add_argument("--c", type=float, default=0.1, help="nu*dt/h**2 (at most 1/(2 ndim))")
    r.add_argument("--boundary", choices=BOUNDARIES, default="dirichlet")
    r.add_argument("--scheduler", choices=("sweep", "blocked", "tiles", "auto"), default="blocked",
                   help="sweep: non-blocked; blocked: PipelinedBlocking (shared cache); "
                        "tiles: WavefrontTiles (each core's cache, 3D); auto: autotune")
    r.add_argument("--threads", type=int, default=2, help="threads (team size) per rank")
    r.add_argument("--block", type=int, default=4, help="layers per block (blocked)")
    r.add_argument("--tile", type=int, help="rows (3D) or points (2D) per tile (tiles; default 16 or 1024)")
    r.add_argument("--streaming-stores", action="store_true",
                   help="sweep: write the grid by non-temporal stores (large grids, AVX-512)")
    r.add_argument("--steps-per-pass", type=int, default=4, help="steps per pass = halo depth")
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--checkpoint", metavar="DIR")
    r.add_argument("--checkpoint-every", type=int, default=50, metavar="STEPS")
    r.add_argument("--monitor", action="store_true", help="print max|u| after each pass")
    r.add_argument("--output", metavar="NPY", help="write the final grid (rank 0)")
    add_debug_option(r)
    args = parser.parse_args(argv)

    def body():
        check(args)
        check_memory_of(args, MPI.COMM_WORLD)
        run(args, MPI.COMM_WORLD)
        return 0
    return run_command(body, "stencil", args.debug)
