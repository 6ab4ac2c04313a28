"""Command line: ``python -m pipekrylov <command>`` (also the ``pipekrylov`` script).

    solve   one solve: a generated problem or a matrix file, any method; rank 0 prints
    bench   one solve's time per iteration split into SpMV, PC, reductions, vector updates
    scaling a strong-scaling series (``run``) or its results (``collect``): CSV, JSON, PNG
    model   the performance model: time per iteration and best depth up to 10^5 ranks
    derive  print the pipelined variant the framework derives from a base method
    compare one problem through PETSc's KSPs and ours (petsc4py): iterations, times
    demo    the main job: where pipelining wins, against the unknowns per rank and an
            injected reduction latency; a table and a picture (this is ``make demo``)
"""
import functools
import json
import math
import os
import sys
import time

import numpy as np

from .kernels.compile import compiling_notice
from .problems import GENERATORS, check_problem_memory, parse_problem, problem_size
from .parallel.commandline import (ArgumentParser, add_debug_option, at_least, check_output_folder, output_errors,
                                   refuse_nested_launch, run_command)

METHODS = ("cg", "cr", "bicgstab", "gmres", "p-cg", "p-cr", "p-bicgstab", "p-cgs", "p-cg-hs", "p-cg-gropp", "p-cg-pr",
           "p-cg2", "b-cg", "p-gmres", "s-cg", "s-gmres", "p-fcg", "p-gcr", "p-fgmres")


def build_problem(comm, problem, matrix):
    """The matrix of ``--problem NAME:N`` or ``--matrix FILE`` (Matrix Market, gzipped or
    not, or PETSc binary: told apart by content)."""
    from . import matrix as mat
    if matrix:
        return mat.read_matrix(matrix, comm), os.path.basename(matrix)
    name, n = parse_problem(problem)
    check_problem_memory(problem, comm)
    return getattr(mat, name)(comm, n), problem


def solve_record(args, comm):
    """One solve as the JSON-able record that ``solve --json`` prints.  Collective."""
    from mpi4py import MPI
    # Compiling is not solving: two untimed iterations first compile (or load) every
    # kernel this solve will call, those specialized for this matrix's rows included.
    with compiling_notice(comm.rank == 0):
        A, label = build_problem(comm, args.problem, args.matrix)
        # b = A * ones, so the error is measurable and every method has the same target
        b = A.matvec(np.ones(A.partition.nlocal))
        solver = make_solver(args.method, args.depth, args.s)
        loop = {"loop": args.loop}
        solver(A, b, rtol=0.0, maxiter=2, M=args.pc, **loop)
        if args.method == "p-cg" and args.depth > 1:   # the loop a hand-over goes on in (0.2-0.4 s to load)
            from . import Solver
            from .deep.plcg import continuation_spec
            Solver(A, continuation_spec(), M=args.pc, **loop).solve(b, rtol=0.0, maxiter=2)
    res = solver(A, b, rtol=args.rtol, atol=args.atol, maxiter=args.maxiter, M=args.pc,
                 monitor=args.monitor, latency=args.latency, **loop)
    r = b - A.matvec(res.x)
    true_residual = np.sqrt(comm.allreduce(r @ r)) / np.sqrt(comm.allreduce(b @ b))
    record = {"problem": label, "n": A.shape[0], "ranks": comm.size, "method": args.method,
              "preconditioner": args.pc, "latency": args.latency, "iterations": res.iterations,
              "reason": res.reason, "info": res.info, "true_residual": true_residual,
              "loop": res.loop,
              **{k: comm.allreduce(v, op=MPI.MAX) for k, v in res.timings.items()}}
    record["time_per_iteration"] = record["total"] / max(res.iterations, 1)
    return record


def make_solver(method, depth=1, s=None):
    """The scipy-style function of ``--method``, ``--depth`` and ``--s`` (each refused
    where the method has no such option, not ignored)."""
    import pipekrylov as pk
    if depth != 1 and method not in ("p-cg", "p-gmres"):
        raise ValueError(f"--depth {depth} is for p-cg (p(l)-CG) and p-gmres (p(l)-GMRES), not {method}")
    if s is not None and method not in ("s-cg", "s-gmres"):
        raise ValueError(f"--s {s} is for s-cg and s-gmres, not {method}")
    s = 4 if s is None else s
    if method in ("s-cg", "s-gmres"):
        return functools.partial(pk.sstep_cg if method == "s-cg" else pk.sstep_gmres, s=s)
    if method in ("p-cg2", "p-fcg", "p-gcr", "p-fgmres"):
        return {"p-cg2": pk.pipecg2, "p-fcg": pk.pipefcg, "p-gcr": pk.pipegcr, "p-fgmres": pk.pipefgmres}[method]
    if method.startswith("b-"):
        from .derive import blocking
        return blocking(method[2:])
    return pk.pipelined(method[2:], depth=depth) if method.startswith("p-") else getattr(pk, method)


def warm_command(args):
    """Compile (or load) the loops of the common solves, Jacobi-preconditioned: CG, p-CG,
    p(2)-CG and GMRES on the distributed CSR format (what ``make demo`` runs, and the
    README's examples); others compile at their first solve, saying so.  ``make env``
    runs it."""
    from mpi4py import MPI
    import pipekrylov as pk
    start = time.perf_counter()
    with compiling_notice(MPI.COMM_WORLD.rank == 0):
        A, _ = build_problem(MPI.COMM_SELF, "poisson2d:64", None)   # large enough for the run kernels
        b = A.matvec(np.ones(A.partition.nlocal))
        for method in ("cg", "p-cg", "p(2)-cg", "gmres"):
            pk.Solver(A, method, M="jacobi").solve(b, rtol=1e-6)
    print(f"pipekrylov: kernels ready ({time.perf_counter() - start:.1f} s)")
    return 0


def check_ranks(comm, expected):
    """Fail unless the communicator has the ranks the launcher was asked for (a launcher
    built for another MPI starts N one-rank jobs instead of one N-rank job)."""
    if expected is not None and comm.size != expected:
        if comm.rank == 0:   # (a launcher of another MPI starts one-rank jobs: each says it)
            print(f"pipekrylov: error: MPI_COMM_WORLD has {comm.size} rank(s), {expected} were requested: "
                  "does the launcher match the MPI that mpi4py uses?", file=sys.stderr)
        return False
    return True


def solve_command(args):
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    if not check_ranks(comm, args.expect_ranks):
        return 2
    record = solve_record(args, comm)
    if comm.rank == 0:
        if args.json:
            print(json.dumps(record))
        else:
            per_iteration = (f"{record['time_per_iteration'] * 1e3:.3f} ms/iteration" if record["iterations"]
                             else f"{record['total'] * 1e3:.1f} ms in all")
            print(f"{args.method} on {record['problem']} (n={record['n']}, {comm.size} ranks): "
                  f"{record['reason']} in {record['iterations']} iterations, true relative "
                  f"residual {record['true_residual']:.2e}, {per_iteration} ({record['loop']} loop), "
                  f"{record['reductions_blocked'] * 1e3:.1f} ms blocked in reductions")
    return 0 if record["info"] == 0 else 1


def bench_command(args):
    """The fastest of ``--repeat`` solves, its time per iteration split into parts."""
    from mpi4py import MPI
    from .scaling import PARTS, collect
    comm = MPI.COMM_WORLD
    if not check_ranks(comm, args.expect_ranks):
        return 2
    at_least(1, repeat=args.repeat)
    records = [solve_record(args, comm) for _ in range(args.repeat)]
    row = collect(records)[0]
    if comm.rank == 0:
        total = row["time_per_iteration"]
        print(f"{args.method} on {row['problem']} (n={row['n']}), {comm.size} ranks, "
              f"{row['iterations']} iterations, best of {args.repeat}: {total * 1e3:.3f} ms/iteration")
        for part, text in zip(PARTS, ("SpMV", "preconditioner", "blocked in reductions",
                                      "vector updates and the rest")):
            print(f"  {text:30s} {row[part] * 1e3:9.3f} ms/it  {row[part] / total:6.1%}")
    return 0


def scaling_command(args):
    from .scaling import check_launcher, collect, read_records, run_series, write_outputs
    if args.action == "run":
        refuse_nested_launch("pipekrylov scaling run")
        for ranks in args.ranks:
            at_least(1, ranks=ranks)
        check_launcher(args.launcher)
        parse_problem(args.problem)
        check_output_folder(args.output)
        solve_args = ["--problem", args.problem, "--rtol", str(args.rtol),
                      "--latency", str(args.latency)]
        solve_args += ["--pc", args.pc] if args.pc else []
        solve_args += ["--maxiter", str(args.maxiter)] if args.maxiter else []
        run_series(args.ranks, args.methods, solve_args, args.output, args.launcher)
        sources = [args.output]
    else:
        if not args.sources:
            raise ValueError("scaling collect: name the records.jsonl files (or their folders) to collect")
        sources = args.sources
    rows = collect(read_records(sources))
    with output_errors(args.output):
        paths = write_outputs(rows, args.output, args.title)
    for path in paths:
        print("wrote", path)
    print(f"{'series':32s} {'ranks':>5s} {'its':>5s} {'ms/it':>9s} {'speedup':>8s} {'eff.':>6s}")
    for row in rows:
        print(f"{row['series']:32s} {row['ranks']:5d} {row['iterations']:5d} "
              f"{row['time_per_iteration'] * 1e3:9.3f} {row['speedup']:8.2f} {row['efficiency']:6.2f}")
    return 0


def demo_command(args):
    """Where pipelining wins: one MPI job, one table, one picture (pipekrylov.demo)."""
    from .demo import main
    refuse_nested_launch("pipekrylov demo")
    check_output_folder(args.output)
    return main(args.output, args.quick)


def model_command(args):
    """Modelled strong scaling (pipekrylov.model) of one problem on a machine."""
    from mpi4py import MPI
    from . import model
    at_least(1, max_ranks=args.max_ranks)
    comm = MPI.COMM_WORLD
    if args.machine == "here":
        machine = model.calibrate(comm)
    elif args.machine in model.MACHINES:
        machine = model.MACHINES[args.machine]
    else:
        machine = model.Machine.load(args.machine)
    if comm.rank != 0:
        return 0
    if args.save_machine:
        machine.save(args.save_machine)
    A_n, A_nnz = problem_size(args.problem)
    ranks = [2 ** k for k in range(int(math.log2(args.max_ranks)) + 1)]
    if ranks[-1] != args.max_ranks:
        ranks.append(args.max_ranks)
    rows = model.predict(machine, A_n, A_nnz, ranks)
    print(model.report(rows, machine, f"{args.problem} (n = {A_n}, nnz = {A_nnz})"))
    if args.plot:
        model.plot_prediction(rows, machine, args.problem, args.plot)
        print("wrote", args.plot)
    return 0


def derive_command(args):
    from . import derive as dv
    from .pipelining import algorithm, is_deep
    at_least(1, replace_every=args.replace_every)
    if is_deep(args.method, args.depth):
        print(algorithm(args.method, args.depth))
        return 0
    if args.depth > 1:
        raise ValueError(f"--depth {args.depth}: deep pipelines exist for cg and gmres only")
    method = dv.BASE_METHODS[args.method]
    sched = dv.derive(method, args.depth, args.replace_every, args.replace, args.blocking)
    if args.passes:
        aux = sched.reductions.auxiliaries
        print(f"== base method\n{method}\n\n== symbolic iteration\n{aux.symbolic}\n\n"
              f"== auxiliary vectors\n{aux}\n\n== reductions\n{sched.reductions}\n\n== schedule")
    print(sched)
    if args.code:
        solver = dv.blocking(method, check=False) if args.blocking else \
            dv.pipelined(method, args.depth, replace_every=args.replace_every, replace_automatic=args.replace,
                         check=False)
        print()
        print(solver.source)
        print("# ---- the compiled loop (loop='compiled'): the whole iteration in one function")
        print(solver.loop_source)
    return 0


def main(argv=None):
    parser = ArgumentParser(prog="pipekrylov", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    solve_options = ArgumentParser(add_help=False)
    option = solve_options.add_argument
    option("--problem", default="poisson2d:200", help="NAME:N, NAME one of " + ", ".join(GENERATORS))
    option("--matrix", help="a Matrix Market (.mtx) or PETSc binary file instead")
    option("--method", default="cg", choices=METHODS, metavar="METHOD",
           help="cg, cr, bicgstab, gmres, or a pipelined method: p-cg, p-cr, p-bicgstab, "
                "p-cgs, p-cg-hs, p-cg-gropp, p-cg-pr (derived), p-cg2, p-gmres; s-cg, s-gmres (s-step); "
                "b-cg (single-reduction CG, derived without overlap)")
    option("--depth", type=int, default=1, help="pipeline depth l of p-cg (p(l)-CG) and p-gmres")
    option("--s", type=int, default=None, help="iterations per reduction of s-cg and s-gmres (1 to 10; default 4)")
    option("--pc", default=None, help="jacobi, bjacobi, ilu0, ic0, bjacobi-cg(k) (default none)")
    option("--rtol", type=float, default=1e-8)
    option("--atol", type=float, default=0.0)
    option("--maxiter", type=int, default=None,
           help="iterations (gmres, s-gmres, p-fgmres: restart cycles, scipy's convention); default 10 n")
    option("--latency", type=float, default=0.0, help="injected reduction latency, seconds")
    option("--monitor", action="store_true", help="PETSc-style residual monitor")
    option("--loop", default="auto", choices=["auto", "compiled", "python"],
           help="auto (compiled where the operators allow), compiled, or python (the same loop interpreted)")
    option("--expect-ranks", type=int, help="fail unless run on this many ranks")
    solve = sub.add_parser("solve", parents=[solve_options],
                           help="solve one problem (run it under mpiexec)")
    solve.add_argument("--json", action="store_true", help="print one JSON record (rank 0)")
    solve.set_defaults(run=solve_command)
    bench = sub.add_parser("bench", help="time per iteration split into SpMV, PC, vector "
                                         "updates and time blocked in reductions",
                           parents=[solve_options])
    bench.add_argument("--repeat", type=int, default=3, help="solves; the fastest is shown")
    bench.set_defaults(run=bench_command)
    scaling = sub.add_parser("scaling", help="strong-scaling study: run a series or collect results")
    scaling.add_argument("action", choices=["run", "collect"])
    scaling.add_argument("sources", nargs="*", help="collect: records.jsonl files or their folders")
    scaling.add_argument("--ranks", type=int, nargs="+", default=[1, 2])
    scaling.add_argument("--methods", nargs="+", default=["cg", "p-cg"])
    scaling.add_argument("--problem", default="poisson2d:1000")
    scaling.add_argument("--pc", default="jacobi")
    scaling.add_argument("--rtol", type=float, default=1e-8)
    scaling.add_argument("--maxiter", type=int, default=None)
    scaling.add_argument("--latency", type=float, default=0.0)
    scaling.add_argument("--launcher", default="mpiexec -n {ranks}",
                         help="command template, e.g. 'srun -n {ranks}' or 'mpirun -np {ranks}'")
    scaling.add_argument("--output", default="results/scaling", help="folder for records, CSV, JSON, PNG")
    scaling.add_argument("--title", default="strong scaling")
    scaling.set_defaults(run=scaling_command)
    modelp = sub.add_parser("model", help="modelled time per iteration and best pipeline depth, "
                                          "up to 10^5 ranks")
    modelp.add_argument("--machine", default="cori-haswell",
                        help="cori-haswell, here (measure; under mpiexec -n p, with as many ranks "
                             "per node as the runs to model, for the reduction and a rank's share of "
                             "the node), or a JSON file saved with --save-machine")
    modelp.add_argument("--save-machine", metavar="JSON", help="write the machine's costs")
    modelp.add_argument("--problem", default="poisson2d:1000")
    modelp.add_argument("--max-ranks", type=int, default=100000)
    modelp.add_argument("--plot", metavar="PNG")
    modelp.set_defaults(run=model_command)
    derive = sub.add_parser("derive", help="print a derived pipelined method")
    derive.add_argument("method", choices=["cg", "cg-hs", "cg-gropp", "cg-pr", "cr", "bicgstab", "cgs", "gmres"])
    derive.add_argument("--depth", type=int, default=1)
    derive.add_argument("--passes", action="store_true", help="also print every intermediate form")
    derive.add_argument("--code", action="store_true", help="also print the generated kernels and the compiled loop")
    derive.add_argument("--replace-every", type=int, default=None, help="residual replacement period")
    derive.add_argument("--replace", action="store_true", help="automatic residual replacement")
    derive.add_argument("--blocking", action="store_true",
                        help="not pipelined: each reduction after its operators (cg: single-reduction CG)")
    derive.set_defaults(run=derive_command)
    compare = sub.add_parser("compare", help="one problem through PETSc's KSPs and ours, in one table")
    from . import compare as compare_module
    compare_module.add_arguments(compare)
    compare.set_defaults(run=compare_module.command)
    warm = sub.add_parser("warm", help="compile the kernels of the common solves (make env does)")
    warm.set_defaults(run=warm_command)
    demo = sub.add_parser("demo", help="the main job: where pipelining wins (a table and a picture)")
    demo.add_argument("--output", default="results/demo", help="folder for the PNG, JSON and CSV")
    demo.add_argument("--quick", action="store_true", help="two points per panel, one round: a check, not a measurement")
    demo.set_defaults(run=demo_command)
    for subparser in sub.choices.values():
        add_debug_option(subparser)
    args = parser.parse_args(argv)
    return run_command(lambda: args.run(args), "pipekrylov", args.debug)
