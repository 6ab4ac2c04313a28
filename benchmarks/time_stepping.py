"""Whole solves as users make them: 100 backward Euler steps of the heat equation on a 2D
grid, each a solve of ``(I + dt L) u_new = u`` warm-started from ``u``, rtol 1e-8.  Our
cg, p-cg, p(2)-cg, Gropp's CG, predict-and-recompute p-CG, p-CG with one reduction per two
iterations (p-cg2), s-step CG and GMRES(30) (s =
4, which PETSc lacks), single-reduction CG (b-cg) and pipelined flexible CG, GCR and GMRES
(p-fcg, p-gcr, p-fgmres) with default arguments, through a Solver set up once and through
the functions, against PETSc's cg, pipecg, pipelcg, groppcg, pipeprcg, pipecg2, cg with
-ksp_cg_single_reduction (cg-sr), pipefcg, pipegcr, pipefgmres and pgmres (against s-gmres)
on a KSP set up once, in one run:

    python -m benchmarks.time_stepping                     # every case below
    python -m benchmarks.time_stepping --ranks 1 --transports shm --pcs jacobi --sizes 256 1024
    python -m benchmarks.time_stepping --methods cg p-fgmres   # some of the methods (cg always)

256 ... 16,384 unknowns per rank, Jacobi and IC(0) (PETSc: block Jacobi with ICC(0)), at 1
and 2 ranks over shared memory and at 2 over TCP (Open MPI's ``btl tcp`` on loopback, a
real reduction latency).  Two time steps per size: one for about 10 iterations per step,
one for about 40 (``dt`` found by bisection for CG).  Set-up is not timed (each solver is
made once, then 100 steps are timed, the best of three runs): it is what a user pays
once, not per step.  Nothing else is subtracted: a step's time is a whole solve's.

Printed per row: time per step (us) and iterations per step of each solver; the ratios
of each of ours (through Solver) to PETSc's like it; and each code's *fixed cost*
per solve, the intercept of time per step against iterations per step between the two
time steps.  A second table: ours with a reduction latency injected (50 and 100 us) at
4,096 unknowns per rank, the 40-iteration step, with p(2)-cg / p-cg and each against cg.
Compilation is excluded: every solver runs once before timing.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys

from benchmarks.common import cpu_name, mpiexec_env
from benchmarks.strong_scaling_limit import TCP, launcher_kind, runnable

SIZES = [256, 1024, 4096, 16384]
TARGETS = [10, 40]   # iterations per step
LATENCIES = [50e-6, 100e-6]
LATENCY_SIZE = 4096
# s-cg, s-gmres: s-step CG and GMRES(30), s = 4 (PETSc has neither: s-gmres against its pgmres);
# b-cg: single-reduction CG; p-fcg, p-gcr, p-fgmres: flexible
METHODS = ("cg", "p-cg", "p(2)-cg", "p-cg-gropp", "p-cg-pr", "p-cg2", "s-cg", "b-cg", "p-fcg", "p-gcr", "p-fgmres", "s-gmres")
# each of ours (through a Solver) against PETSc's like it (cg-sr: cg -ksp_cg_single_reduction)
RATIOS = [("cg", "cg"), ("p-cg", "pipecg"), ("p-cg-gropp", "groppcg"), ("p-cg-pr", "pipeprcg"), ("p-cg2", "pipecg2"), ("b-cg", "cg-sr"),
          ("p-fcg", "pipefcg"), ("p-gcr", "pipegcr"), ("p-fgmres", "pipefgmres"), ("s-gmres", "pgmres")]
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def worker(sizes, pcs, steps, repeat, with_petsc, latencies, methods=METHODS):
    from mpi4py import MPI
    from pipekrylov.timing import calibrate_dt, heat, petsc_steppers, steppers, time_each
    comm = MPI.COMM_WORLD
    for pc in pcs:
        for local in sizes:
            total = local * comm.size
            points = {}
            for target in TARGETS:
                c = calibrate_dt(comm, total, target, pc)
                A, u0 = heat(comm, total, c)
                funcs = steppers(A, u0, pc, names=methods)
                if with_petsc:
                    funcs.update(petsc_steppers(A, u0, pc, names=methods))
                row = time_each(comm, funcs, u0, steps, repeat,
                                {"ranks": comm.size, "pc": pc, "local": total // comm.size, "target": target, "c": c})
                points[target] = row
                if comm.rank == 0:
                    print("ROW " + json.dumps(row), flush=True)
            if comm.rank == 0:
                print("FIXED " + json.dumps(fixed_costs(points, pc, total // comm.size, comm.size)), flush=True)
            if local == LATENCY_SIZE and latencies:
                c = calibrate_dt(comm, total, TARGETS[-1], pc)
                A, u0 = heat(comm, total, c)
                for latency in latencies:
                    funcs = {k: v for k, v in steppers(A, u0, pc, latency=latency, names=methods).items()
                             if k.endswith("Solver")}
                    row = time_each(comm, funcs, u0, steps, repeat,
                                    {"ranks": comm.size, "pc": pc, "local": local, "latency_us": latency * 1e6})
                    if comm.rank == 0:
                        print("LATENCY " + json.dumps(row), flush=True)


def fixed_costs(points, pc, local, ranks):
    """Each solver's fixed cost per solve (us): the intercept of time per step against
    iterations per step, from the two time steps."""
    low, high = points[TARGETS[0]], points[TARGETS[-1]]
    out = {"ranks": ranks, "pc": pc, "local": local}
    for name in low:
        if name.endswith(" its") or name + " its" not in low or name + " its" not in high:
            continue
        di = high[name + " its"] - low[name + " its"]
        if di > 0:
            per = (high[name] - low[name]) / di
            out[name] = low[name] - per * low[name + " its"]
            out[name + " per it"] = per
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="*", default=SIZES)
    parser.add_argument("--ranks", type=int, nargs="*", default=[1, 2])
    parser.add_argument("--transports", nargs="*", default=["shm", "tcp"], choices=["shm", "tcp"])
    parser.add_argument("--pcs", nargs="*", default=["jacobi", "ic0"], choices=["jacobi", "ic0"])
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-latency", action="store_true", help="skip the injected-latency table")
    parser.add_argument("--no-petsc", action="store_true")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--methods", nargs="*", default=list(METHODS), choices=METHODS,
                        help="ours to time, with PETSc's like them (cg is always timed)")
    parser.add_argument("--timeout", type=float, default=3600)
    args = parser.parse_args()
    methods = tuple(m for m in METHODS if m == "cg" or m in args.methods)
    try:
        import petsc4py  # noqa: F401
        with_petsc = not args.no_petsc
    except ImportError:
        with_petsc = False
    latencies = [] if args.no_latency else LATENCIES
    if args.worker:
        worker(args.sizes, args.pcs, args.steps, args.repeat, with_petsc, latencies, methods)
        return 0
    mpiexec = shutil.which("mpiexec")
    kind = launcher_kind(mpiexec)
    env = mpiexec_env()
    rows = {"ROW": [], "FIXED": [], "LATENCY": []}
    for transport in args.transports:
        for ranks in args.ranks:
            if not runnable(transport, ranks, kind):
                continue
            command = [mpiexec, *(TCP if transport == "tcp" else []), "-n", str(ranks), sys.executable, "-m",
                       "benchmarks.time_stepping", "--worker", "--steps", str(args.steps), "--repeat",
                       str(args.repeat), "--pcs", *args.pcs, "--sizes", *map(str, args.sizes), "--methods", *methods]
            command += ["--no-petsc"] * (not with_petsc) + ["--no-latency"] * (transport == "tcp" or not latencies)
            print(f"# {transport}, {ranks} rank(s) ...", file=sys.stderr, flush=True)
            out = subprocess.run(command, capture_output=True, text=True, env=env, timeout=args.timeout, cwd=ROOT)
            if out.returncode != 0:
                raise SystemExit(f"{' '.join(command)} failed:\n{out.stdout[-2000:]}{out.stderr[-4000:]}")
            for line in out.stdout.splitlines():
                kind_, _, text = line.partition(" ")
                if kind_ in rows:
                    rows[kind_].append(dict(json.loads(text), transport=transport))
    print(report(rows, with_petsc, methods))
    return 0


def report(rows, with_petsc, methods=METHODS):
    import platform
    from pipekrylov.compare import markdown_table
    from pipekrylov.timing import PETSC_STEPPERS
    ours = [f"{n} {how}" for n in methods for how in ("Solver", "function")]
    petsc = [f"PETSc {PETSC_STEPPERS[n]}" for n in methods if n in PETSC_STEPPERS] if with_petsc else []
    ratios = [(a, b) for a, b in RATIOS if a in methods]
    deep = "p-cg" in methods and "p(2)-cg" in methods   # p(2)-cg / p-cg's columns

    def us(v):
        return "-" if v is None else f"{v:,.1f}"

    def ratio(a, b):
        return "-" if a is None or not b else f"{a / b:.2f}"
    header = ["transport", "ranks", "M", "unknowns/rank", "its/step (cg)"] + ours + petsc
    if with_petsc:
        header += [f"{a} / {b}" for a, b in ratios]
    header += ["p(2)-cg / p-cg"] * deep
    table = []
    for r in rows["ROW"]:
        line = [r["transport"], r["ranks"], r["pc"], f"{r['local']:,}", f"{r.get('cg Solver its', 0):.1f}"]
        line += [us(r.get(n)) for n in ours + petsc]
        if with_petsc:
            line += [ratio(r.get(f"{a} Solver"), r.get(f"PETSc {b}")) for a, b in ratios]
        line += [ratio(r.get("p(2)-cg Solver"), r.get("p-cg Solver"))] * deep
        table.append(line)
    text = [f"time per backward Euler step (us), rtol 1e-8, warm start, set-up not timed; "
            f"{cpu_name()}, {os.cpu_count()} cores, {platform.node()}", markdown_table(header, table)]
    its = [[r["transport"], r["ranks"], r["pc"], f"{r['local']:,}"] + [f"{r.get(n + ' its', 0):.1f}"
                                                                     for n in ours[::2] + petsc]
           for r in rows["ROW"]]
    text += ["", "iterations per step", markdown_table(["transport", "ranks", "M", "unknowns/rank"] + ours[::2] + petsc,
                                                       its)]
    fixed_names = [f"{n} Solver" for n in ("cg", "p-cg", "p(2)-cg") if n in methods]
    pipelined = "p-cg" in methods and with_petsc
    fixed_names += (["PETSc cg"] if with_petsc else []) + ["PETSc pipecg"] * pipelined
    fixed = [[r["transport"], r["ranks"], r["pc"], f"{r['local']:,}"] + [us(r.get(n)) for n in fixed_names] +
             ([ratio(r.get("cg Solver"), r.get("PETSc cg"))] if with_petsc else []) +
             [ratio(r.get("p-cg Solver"), r.get("PETSc pipecg"))] * pipelined
             for r in rows["FIXED"]]
    text += ["", "fixed cost per solve (us): the intercept of time per step against iterations per step",
             markdown_table(["transport", "ranks", "M", "unknowns/rank"] + fixed_names +
                            (["cg / PETSc cg"] if with_petsc else []) + ["p-cg / pipecg"] * pipelined, fixed)]
    if rows["LATENCY"]:
        names = [f"{n} Solver" for n in methods]
        lat = [[r["ranks"], r["pc"], f"{r['local']:,}", f"{r['latency_us']:g}"] + [us(r.get(n)) for n in names] +
               [f"{r.get('cg Solver its', 0):.1f}"] + [ratio(r.get("p(2)-cg Solver"), r.get("p-cg Solver"))] * deep +
               [ratio(r.get(n), r.get("cg Solver")) for n in names[1:]]
               for r in rows["LATENCY"]]
        text += ["", "with a reduction latency injected (the 40-iteration step)",
                 markdown_table(["ranks", "M", "unknowns/rank", "latency (us)"] + names +
                                ["its/step (cg)"] + ["p(2)-cg / p-cg"] * deep + [f"{n} / cg" for n in methods[1:]],
                                lat)]
    return "\n".join(text)


if __name__ == "__main__":
    sys.exit(main())
