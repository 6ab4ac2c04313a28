"""Command line: ``python -m pipekrylov <command>`` (also the ``pipekrylov`` script).

    solve   one solve: a generated problem or a matrix file, any method; rank 0 prints
    derive  print the pipelined variant the framework derives from a base method
    demo    the main job: classic solvers at 1 and 2 ranks, with and without an
            injected reduction latency; prints a table (this is ``make demo``)
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time

import numpy as np

GENERATORS = ("poisson2d", "poisson3d", "anisotropic2d", "convection_diffusion2d")


def build_problem(comm, problem, matrix):
    """The matrix of ``--problem NAME:N`` or ``--matrix FILE`` (.mtx or PETSc binary)."""
    from . import matrix as mat
    if matrix:
        reader = mat.read_matrix_market if matrix.endswith(".mtx") else mat.read_petsc_binary
        return reader(matrix, comm), os.path.basename(matrix)
    name, _, n = problem.partition(":")
    if name not in GENERATORS:
        raise SystemExit(f"unknown problem {name!r}; choose from {', '.join(GENERATORS)}")
    return getattr(mat, name)(comm, int(n or 100)), problem


def solve_command(args):
    from mpi4py import MPI
    import pipekrylov as pk
    comm = MPI.COMM_WORLD
    A, label = build_problem(comm, args.problem, args.matrix)
    # b = A * ones, so the error is measurable and every method has the same target
    b = A.matvec(np.ones(A.partition.nlocal))
    if args.method.startswith("p-"):
        solver = pk.pipelined(args.method[2:])
    else:
        solver = getattr(pk, args.method)
    res = solver(A, b, rtol=args.rtol, atol=args.atol, maxiter=args.maxiter, M=args.pc,
                 monitor=args.monitor, latency=args.latency)
    r = b - A.matvec(res.x)
    true_residual = np.sqrt(comm.allreduce(r @ r)) / np.sqrt(comm.allreduce(b @ b))
    record = {"problem": label, "n": A.shape[0], "ranks": comm.size, "method": args.method,
              "pc": args.pc, "latency": args.latency, "iterations": res.iterations,
              "reason": res.reason, "info": res.info, "true_residual": true_residual,
              **{k: comm.allreduce(v, op=MPI.MAX) for k, v in res.timings.items()}}
    record["time_per_iteration"] = record["total"] / max(res.iterations, 1)
    if comm.rank == 0:
        if args.json:
            print(json.dumps(record))
        else:
            print(f"{args.method} on {label} (n={A.shape[0]}, {comm.size} ranks): {res.reason} in "
                  f"{res.iterations} iterations, true relative residual {true_residual:.2e}, "
                  f"{record['time_per_iteration'] * 1e3:.3f} ms/iteration, "
                  f"{record['reductions_blocked'] * 1e3:.1f} ms blocked in reductions")
    return 0 if res.info == 0 else 1


def demo_command(args):
    """Run solves under mpiexec at 1 and 2 ranks and print one table."""
    mpiexec = shutil.which("mpiexec")
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1", NUMBA_NUM_THREADS="1")
    rows = []
    t0 = time.perf_counter()
    for ranks in (1, 2):
        for latency in (0.0, args.latency):
            for method in ("cg", "p-cg", "cr", "p-cr", "bicgstab", "p-bicgstab"):
                command = [mpiexec, "-n", str(ranks), sys.executable, "-m", "pipekrylov", "solve",
                           "--problem", args.problem, "--method", method, "--pc", "jacobi",
                           "--rtol", "1e-8", "--latency", str(latency), "--json"]
                out = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
                if out.returncode not in (0, 1) or not out.stdout.strip():
                    print(out.stdout, out.stderr, file=sys.stderr)
                    raise SystemExit(f"demo: {' '.join(command)} failed")
                rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
                r = rows[-1]
                print(f"  done: {method:9s} ranks={ranks} latency={latency * 1e3:.1f} ms "
                      f"({time.perf_counter() - t0:.0f} s)", flush=True)
    print()
    print(f"Problem {rows[0]['problem']} (n = {rows[0]['n']}), Jacobi preconditioner, rtol 1e-8")
    header = ["method", "ranks", "latency ms", "its", "reason", "true rel. res.", "ms/it",
              "spmv ms/it", "blocked ms/it"]
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join("---" for _ in header) + "|")
    for r in rows:
        its = max(r["iterations"], 1)
        print(f"| {r['method']} | {r['ranks']} | {r['latency'] * 1e3:.1f} | {r['iterations']} | "
              f"{r['reason']} | {r['true_residual']:.1e} | {r['time_per_iteration'] * 1e3:.3f} | "
              f"{r['spmv'] / its * 1e3:.3f} | {r['reductions_blocked'] / its * 1e3:.3f} |")
    failed = [r for r in rows if r["info"] != 0]
    if failed:
        raise SystemExit(f"demo: {len(failed)} solves did not converge")
    return 0


def derive_command(args):
    from . import derive as dv
    method = dv.BASE_METHODS[args.method]
    sched = dv.derive(method, args.depth, args.replace_every, args.replace)
    if args.passes:
        aux = sched.reductions.auxiliaries
        print(f"== base method\n{method}\n\n== symbolic iteration\n{aux.symbolic}\n\n"
              f"== auxiliary vectors\n{aux}\n\n== reductions\n{sched.reductions}\n\n== schedule")
    print(sched)
    if args.code:
        print()
        print(dv.pipelined(method, args.depth, replace_every=args.replace_every,
                           replace_automatic=args.replace, check=False).source)
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(prog="pipekrylov", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    solve = sub.add_parser("solve", help="solve one problem (run it under mpiexec)")
    solve.add_argument("--problem", default="poisson2d:200", help="NAME:N, NAME one of " + ", ".join(GENERATORS))
    solve.add_argument("--matrix", help="a Matrix Market (.mtx) or PETSc binary file instead")
    solve.add_argument("--method", default="cg",
                       help="cg, cr, bicgstab, gmres, or a derived pipelined method: p-cg, p-cr, "
                            "p-bicgstab, p-cgs")
    solve.add_argument("--pc", default=None, help="jacobi, bjacobi, ilu0, ic0 (default none)")
    solve.add_argument("--rtol", type=float, default=1e-8)
    solve.add_argument("--atol", type=float, default=0.0)
    solve.add_argument("--maxiter", type=int, default=None)
    solve.add_argument("--latency", type=float, default=0.0, help="injected reduction latency, seconds")
    solve.add_argument("--monitor", action="store_true", help="PETSc-style residual monitor")
    solve.add_argument("--json", action="store_true", help="print one JSON record (rank 0)")
    solve.set_defaults(run=solve_command)
    derive = sub.add_parser("derive", help="print a derived pipelined method")
    derive.add_argument("method", choices=["cg", "cg-hs", "cr", "bicgstab", "cgs"])
    derive.add_argument("--depth", type=int, default=1)
    derive.add_argument("--passes", action="store_true", help="also print every intermediate form")
    derive.add_argument("--code", action="store_true", help="also print the generated kernels")
    derive.add_argument("--replace-every", type=int, default=None, help="residual replacement period")
    derive.add_argument("--replace", action="store_true", help="automatic residual replacement")
    derive.set_defaults(run=derive_command)
    demo = sub.add_parser("demo", help="the main job: compare methods at 1 and 2 ranks")
    demo.add_argument("--problem", default="poisson2d:200")
    demo.add_argument("--latency", type=float, default=5e-4, help="injected latency, seconds")
    demo.set_defaults(run=demo_command)
    args = parser.parse_args(argv)
    return args.run(args)
