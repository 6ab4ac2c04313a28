"""Command line: ``python -m parareal run SETUP ...`` (also under mpiexec).

    python -m parareal run burgers --set n=40 --slices 24 --iterations 4 --reference
    mpiexec -n 4 python -m parareal run heat --mode mpi --iterations 2 --checkpoint ckpt/
"""
import json
import resource
import sys

import numpy as np

from pipekrylov.kernels.compile import compiling_notice
from pipekrylov.memory import check_memory
from pipekrylov.parallel.commandline import (ArgumentParser, add_debug_option, at_least, check_output_path,
                                             launcher_size, run_command, write_output)

from .config import PararealConfig
from .hooks import Checkpoint, PrintDefects
from .setups import SETUPS, check_setup, make_setup, setup_unknowns

MODES = ("serial", "threads", "threads-standard", "mpi", "mpi-standard")


def _value(text):
    try:
        return json.loads(text)
    except ValueError:
        return text


def parse(argv):
    parser = ArgumentParser(prog="python -m parareal", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run Parareal on a named setup")
    run.add_argument("setup", choices=sorted(SETUPS))
    run.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                     help="setup parameters, e.g. n=40 t_end=0.5")
    run.add_argument("--mode", choices=MODES, default="serial")
    run.add_argument("--slices", type=int, help="P (default: the number of ranks under MPI, else 4)")
    run.add_argument("--iterations", type=int, default=2, help="K, the most iterations")
    run.add_argument("--tol", type=float, default=None, help="per-slice stopping tolerance")
    run.add_argument("--checkpoint", metavar="DIR", help="save every iteration; resume from DIR")
    run.add_argument("--monitor", action="store_true", help="print each slice's change per iteration")
    run.add_argument("--reference", action="store_true",
                     help="also run the serial fine propagator and report the defect per iteration")
    run.add_argument("--plot", metavar="PNG", help="plot the defect per iteration (with --reference: "
                     "to the serial fine run; else each slice's change)")
    run.add_argument("--output", metavar="NPZ", help="write the result (rank 0)")
    add_debug_option(run)
    return parser.parse_args(argv)


def _settings(items):
    """--set KEY=VALUE ... as a dict (values parsed as JSON where they are)."""
    params = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--set {item!r}: expected KEY=VALUE, e.g. n=40")
        params[key] = _value(value)
    return params


def _check(args):
    """What can be refused before anything runs."""
    at_least(1, slices=args.slices, iterations=args.iterations)
    if args.output:
        check_output_path(args.output, "NPZ")


def _check_launch(args):
    """Only the MPI controllers share a job: under mpiexec, the others would each run it
    all (and write --output) once per process."""
    if not args.mode.startswith("mpi") and launcher_size() > 1:
        raise ValueError(f"--mode {args.mode} under mpiexec ({launcher_size()} processes): each would run the "
                         "whole job and write its --output; use --mode mpi (or mpi-standard) under mpiexec, "
                         "or run without mpiexec")


def _check_memory(args, params, slices, iterations, comm):
    """Refuse a grid too large for this machine before the setup builds it: each process
    keeps a few states per slice it runs (its input, output, G and F values), every
    iteration's with --reference (which rank 0 of the MPI controllers gathers), and the
    propagators' stages, work arrays and matrices (about 40 states more)."""
    unknowns = setup_unknowns(args.setup, **params)
    state = 8 * unknowns
    history = iterations + 1 if args.reference else 0
    here = 1 if comm is not None else slices
    check_memory(f"setup {args.setup!r} with {unknowns} unknowns, {slices} slices,",
                 state * (40 + here * (6 + history)), comm,
                 once=state * slices * history if comm is not None else 0)


def main(argv=None):
    args = parse(argv)
    return run_command(lambda: _main(args), "parareal", args.debug)


def _main(args):
    _check(args)
    params = _settings(args.set)
    check_setup(args.setup, **params)
    _check_launch(args)
    comm = None
    if args.mode.startswith("mpi"):
        from mpi4py import MPI
        comm = MPI.COMM_WORLD
    rank = 0 if comm is None else comm.Get_rank()
    slices = args.slices if args.slices is not None else (comm.Get_size() if comm is not None else 4)
    # Slice s is exact after s + 1 iterations (its input stops changing), so iterations
    # past P change nothing; the controllers store K x P values, which K = 10**9 made
    # 32 GB before the first step.
    iterations = min(args.iterations, slices)
    _check_memory(args, params, slices, iterations, comm)
    setup = make_setup(args.setup, **params)
    config = PararealConfig(slices, setup.t_end, iterations, tol=args.tol,
                            keep_history=args.reference)
    hooks = []
    if args.monitor:
        hooks.append(PrintDefects())
    if args.checkpoint:
        hooks.append(Checkpoint(args.checkpoint))
    with compiling_notice(rank == 0):   # compiling is not computing: a's costs exclude it
        for propagator in (setup.coarse, setup.fine):
            propagator(setup.u0, config.t0, config.t0 + propagator.dt)
    result = _run(args.mode, setup, config, comm, hooks)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # MiB (Linux: KiB)
    peaks = [peak] if comm is None else comm.allgather(peak)
    summary = _summary(result, setup, peaks)
    if args.reference and rank == 0:
        fine = setup.fine(setup.u0, config.t0, config.t_end)
        scale = np.max(np.abs(fine))
        summary["defects"] = [float(np.max(np.abs(result.history[k][-1] - fine)) / scale)
                              for k in range(1, result.iterations + 1)]
    if args.plot and rank == 0:
        from .report import plot_defects
        if args.reference:
            plot_defects(summary["defects"], args.plot,
                         title=f"{setup.name}: defect to the serial fine run, P = {slices}",
                         published=(setup.published or {}).get(slices))
        else:
            plot_defects(result.changes, args.plot,
                         title=f"{setup.name}: change of each slice's end value, P = {slices}")
    if rank == 0:
        _print(summary, setup)
    if args.output:   # the path as given (np.savez would add .npz)
        write_output(args.output, lambda f: np.savez(f, u_end=result.u_end, changes=result.changes,
                                                     summary=json.dumps(summary)), comm)
    return 0


def _run(mode, setup, config, comm, hooks):
    from . import run_mpi, run_serial, run_threads
    args = (setup.u0, setup.coarse, setup.fine, config)
    if mode == "serial":
        return run_serial(*args, hooks=hooks)
    if mode.startswith("threads"):
        return run_threads(*args, pipelined=mode == "threads", hooks=hooks)
    return run_mpi(*args, comm=comm, pipelined=mode == "mpi", hooks=hooks)


def _summary(result, setup, peaks):
    fine_runs, coarse_runs = sum(result.fine_runs), sum(result.coarse_runs)
    fine_each = sum(result.fine_time) / max(fine_runs, 1)
    coarse_each = sum(result.coarse_time) / max(coarse_runs, 1)
    return {"setup": setup.name, "controller": result.controller, "slices": len(result.converged_at),
            "iterations": result.iterations, "converged_at": result.converged_at,
            "fine_runs": result.fine_runs, "wall_time": result.wall_time,
            "fine_time_per_slice": fine_each, "coarse_time_per_slice": coarse_each,
            "a": coarse_each / fine_each if fine_each else float("nan"),
            "restarted_from": result.restarted_from, "peak_rss_mib": sum(peaks),
            "processes": len(peaks)}


def _print(summary, setup):
    print(f"{setup.description}")
    print(f"{summary['controller']}: P = {summary['slices']}, K = {summary['iterations']}, "
          f"wall {summary['wall_time']:.3f} s, a = {summary['a']:.4f}, "
          f"peak memory {summary['peak_rss_mib']:.0f} MiB in {summary['processes']} process(es)"
          + (f", resumed after iteration {summary['restarted_from']}" if summary["restarted_from"] >= 0 else ""))
    published = (setup.published or {}).get(summary["slices"], [])
    for k, d in enumerate(summary.get("defects", []), 1):
        print(f"  iteration {k}: defect {d:.2e}"
              + (f" (published {published[k - 1]:.1e})" if k <= len(published) else ""))


if __name__ == "__main__":
    sys.exit(main())
