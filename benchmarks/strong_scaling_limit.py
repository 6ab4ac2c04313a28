"""Time per iteration in the strong-scaling limit: few unknowns per rank, reductions that
cost more than the local work.  Our cg, p-cg, p(2)-cg (on the compiled and the Python
loop where they have both), Gropp's CG, predict-and-recompute p-CG, p-CG with one reduction per two iterations (p-cg2), s-step CG (s = 4
and 8; PETSc has none: against its pipecg) and single-reduction CG (b-cg) against PETSc's
cg, pipecg, pipelcg, groppcg, pipeprcg, pipecg2 and cg with -ksp_cg_single_reduction (cg-sr), in
one run:

    python -m benchmarks.strong_scaling_limit                  # every case below
    python -m benchmarks.strong_scaling_limit --ranks 1 2 --transports shm --sizes 256 1024
    python -m benchmarks.strong_scaling_limit --family gmres   # the GMRES family instead

``--family gmres``: our gmres (its default, Gram-Schmidt twice with the second pass a step
late, DCGS2; "gmres cgs2", twice in each step; "gmres cgs", once, as PETSc's default),
p(1)-gmres, p(2)-gmres, s-step GMRES (s = 4 and 8; against pgmres) and pipelined flexible
GMRES (p-fgmres, PETSc's shift 1) against PETSc's gmres, pgmres and pipefgmres, restart 30,
Jacobi, on 2D convection-diffusion (nonsymmetric); "hidden" is then p(1)-gmres's.
``--family flexible``: our p-fcg and p-gcr (pipelined flexible CG and GCR, mmax 15,
Notay's truncation) against PETSc's pipefcg, fcg and pipegcr (their defaults, with the
natural norm, which adds no reduction), beside cg and p-cg; "hidden" is then p-fcg's.

2D Poisson with 256 ... 65,536 unknowns per rank and 10^6 in total, Jacobi, at 1, 2
and 4 ranks, over shared memory and over TCP (Open MPI ``--mca btl tcp,self --mca
btl_tcp_if_include lo``: the ranks talk through the kernel's network stack, a real
reduction latency: 5-10 us on the VM these docs were written on, 50-300 us on busier
machines).  The script starts ``mpiexec`` itself for each
(ranks, transport) and prints one table.

Time per iteration is the difference of two solves of N1 and N2 iterations (rtol 0),
divided by N2 - N1, the median over ``--repeat`` rounds or more (up to 200 where a round
is short; each solver's rounds together): the per-iteration cost without the per-solve
set-up, which is printed apart ("fixed", for our compiled p-cg and PETSc's pipecg).
N2 stays below the iterations p-cg takes to reach rounding, so no solver stops early.
"hidden" is the share of a reduction's latency the compiled p-cg hides: 1 - (time
blocked in its wait) / (time of a blocking Allreduce), from the trace.
Compilation is excluded: every solver runs once before timing.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time

import numpy as np

from benchmarks.common import cpu_name, mpiexec_env
from pipekrylov.model import communication_costs
from pipekrylov.timing import PLCG, per_iteration, petsc_solver, poisson

SIZES = [256, 1024, 4096, 16384, 65536]
TOTAL = 10 ** 6
OURS = ["cg", "p-cg compiled", "p-cg python", "p(2)-cg compiled", "p(2)-cg python", "gropp-cg", "p-cg-pr", "p-cg2",
        "s(4)-cg", "s(8)-cg", "b-cg"]
# cg-sr: cg -ksp_cg_single_reduction
PETSC = ["PETSc cg", "PETSc pipecg", "PETSc pipelcg", "PETSc groppcg", "PETSc pipeprcg", "PETSc pipecg2", "PETSc cg-sr"]
OURS_GMRES = ["gmres", "gmres cgs2", "gmres cgs", "p(1)-gmres", "p(2)-gmres", "s(4)-gmres", "s(8)-gmres", "p-fgmres"]
PETSC_GMRES = ["PETSc gmres", "PETSc pgmres", "PETSc pipefgmres"]
OURS_FLEXIBLE = ["cg", "p-cg compiled", "p-fcg", "p-gcr"]
PETSC_FLEXIBLE = ["PETSc cg", "PETSc pipecg", "PETSc fcg", "PETSc pipefcg", "PETSc pipegcr"]
# per family: (ours, PETSc's, our pipelined reference for "fixed" and "hidden", PETSc's reference)
FAMILIES = {"cg": (OURS, PETSC, "p-cg compiled", "PETSc pipecg"),
            "gmres": (OURS_GMRES, PETSC_GMRES, "p(1)-gmres", "PETSc pgmres"),
            "flexible": (OURS_FLEXIBLE, PETSC_FLEXIBLE, "p-fcg", "PETSc pipefcg")}
# each of ours against PETSc's like it (PETSc's gmres orthogonalizes once, as "gmres cgs")
GMRES_RATIOS = [("gmres", "PETSc gmres"), ("gmres cgs2", "PETSc gmres"), ("gmres cgs", "PETSc gmres"),
                ("p(1)-gmres", "PETSc pgmres"), ("p(2)-gmres", "PETSc pgmres"), ("p(1)-gmres", "PETSc pipefgmres"),
                ("s(4)-gmres", "PETSc pgmres"), ("s(8)-gmres", "PETSc pgmres"), ("p-fgmres", "PETSc pipefgmres")]
FLEXIBLE_RATIOS = [("p-fcg", "PETSc pipefcg"), ("p-fcg", "PETSc fcg"), ("p-gcr", "PETSc pipegcr"),
                   ("p-fcg", "PETSc pipecg")]
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TCP = ["--mca", "btl", "tcp,self", "--mca", "btl_tcp_if_include", "lo"]


# ------------------------------------------------------------------ one mpiexec run
def our_solvers():
    import pipekrylov as pk
    from pipekrylov.derive import blocking
    pcg, gropp, prcg, bcg = pk.pipelined("cg"), pk.pipelined("cg-gropp"), pk.pipelined("cg-pr"), blocking("cg")
    return {
        "cg": lambda A, b, n, **kw: pk.cg(A, b, rtol=0.0, maxiter=n, M="jacobi", **kw),
        "p-cg compiled": lambda A, b, n, **kw: pcg(A, b, rtol=0.0, maxiter=n, M="jacobi", loop="compiled", **kw),
        "p-cg python": lambda A, b, n, **kw: pcg(A, b, rtol=0.0, maxiter=n, M="jacobi", loop="python", **kw),
        "p(2)-cg compiled": lambda A, b, n, **kw: pk.plcg(A, b, rtol=0.0, maxiter=n, M="jacobi", loop="compiled",
                                                           **PLCG, **kw),
        "p(2)-cg python": lambda A, b, n, **kw: pk.plcg(A, b, rtol=0.0, maxiter=n, M="jacobi", loop="python",
                                                         **PLCG, **kw),
        "gropp-cg": lambda A, b, n, **kw: gropp(A, b, rtol=0.0, maxiter=n, M="jacobi", **kw),
        "p-cg-pr": lambda A, b, n, **kw: prcg(A, b, rtol=0.0, maxiter=n, M="jacobi", **kw),
        "p-cg2": lambda A, b, n, **kw: pk.pipecg2(A, b, rtol=0.0, maxiter=n, M="jacobi", **kw),
        "s(4)-cg": lambda A, b, n, **kw: pk.sstep_cg(A, b, s=4, rtol=0.0, maxiter=n, M="jacobi", **kw),
        "s(8)-cg": lambda A, b, n, **kw: pk.sstep_cg(A, b, s=8, rtol=0.0, maxiter=n, M="jacobi", **kw),
        "b-cg": lambda A, b, n, **kw: bcg(A, b, rtol=0.0, maxiter=n, M="jacobi", **kw),
        "p-fcg": lambda A, b, n, **kw: pk.pipefcg(A, b, rtol=0.0, maxiter=n, M="jacobi", **kw),
        "p-gcr": lambda A, b, n, **kw: pk.pipegcr(A, b, rtol=0.0, maxiter=n, M="jacobi", **kw),
    }


def our_gmres():
    """GMRES(30) on a Solver, whose ``maxiter`` counts iterations as PETSc's max_it does
    (the scipy-style functions count restart cycles, as scipy does)."""
    import pipekrylov as pk
    kept = {}

    def on_solver(method, **options):
        def solve(A, b, n, **kw):
            key = (id(A), method, tuple(sorted(options.items())), tuple(sorted(kw.items())))
            if key not in kept:
                kept[key] = pk.Solver(A, method, M="jacobi", restart=30, **options, **kw)
            return kept[key].solve(b, rtol=0.0, maxiter=n)
        return solve
    return {"gmres": on_solver("gmres"), "gmres cgs2": on_solver("gmres", orthogonalization="cgs2"),
            "gmres cgs": on_solver("gmres", orthogonalization="cgs"),
            "p(1)-gmres": on_solver("p(1)-gmres"),
            "p(2)-gmres": on_solver("p(2)-gmres"),
            "s(4)-gmres": on_solver("s-gmres", s=4), "s(8)-gmres": on_solver("s-gmres", s=8),
            "p-fgmres": on_solver("p-fgmres", shift=1.0)}


def convection_diffusion(comm, total):
    """The GMRES family's problem: 2D convection-diffusion, b = A 1."""
    from pipekrylov.matrix import convection_diffusion2d
    from pipekrylov.timing import grid
    A = convection_diffusion2d(comm, *grid(total))
    return A, A.matvec(np.ones(A.partition.nlocal))


def allreduce_time(comm, repeat=200):
    """The best time of a blocking Allreduce of 4 doubles (what one fused reduction
    costs at the least), the slowest rank's."""
    from mpi4py import MPI
    send, recv, times = np.ones(4), np.empty(4), []
    for _ in range(repeat):
        comm.Barrier()
        t0 = time.perf_counter()
        comm.Allreduce(send, recv, op=MPI.SUM)
        times.append(comm.allreduce(time.perf_counter() - t0, op=MPI.MAX))
    return min(times)


def worker(sizes, repeat, with_petsc, family="cg"):
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    ours, petsc, reference, _ = FAMILIES[family]
    ours = {name: f for name, f in (our_gmres() if family == "gmres" else our_solvers()).items() if name in ours}
    t_reduce = allreduce_time(comm) if comm.size > 1 else 0.0
    for size in sizes:
        total = size * comm.size if size != TOTAL else TOTAL
        A, b = (convection_diffusion if family == "gmres" else poisson)(comm, total)
        costs = None
        if comm.size > 1:   # the halo: a grid line to each neighbouring rank
            line = comm.allreduce(len(A.halo.ghost_values), op=MPI.MAX) // (1 if comm.size == 2 else 2)
            costs = communication_costs(comm, halo=line)
        # N2 below the iterations p-cg takes to reach rounding (rtol 0 stops it there),
        # and fewer for the large sizes (the figure is clear after a few iterations there)
        reach = ours[reference](A, b, 400).iterations
        n2 = max(8, min(300, int(0.8 * reach), max(24, 30_000_000 // A.partition.nlocal)))
        n1 = max(2, n2 // 4)
        funcs = {name: (lambda f: lambda n: f(A, b, n).iterations)(f) for name, f in ours.items()}
        if with_petsc:
            for name in petsc:
                funcs[name] = petsc_solver(A, b, name.split()[1])
        row = {"ranks": comm.size, "local": A.partition.n // comm.size, "total": A.partition.n,
               "n1": n1, "n2": n2, "allreduce_us": t_reduce * 1e6,
               "iallreduce_us": costs.reduction * 1e6 if costs else 0.0,
               "allreduce_overhead_us": costs.overhead * 1e6 if costs else 0.0,
               "halo_us": costs.halo * 1e6 if costs else 0.0,
               "blocking_us": costs.blocking * 1e6 if costs else 0.0}
        for name, measured in per_iteration(comm, funcs, n1, n2, repeat).items():
            row[name] = None if measured is None else measured[0] * 1e6
            row[name + " fixed"] = None if measured is None else measured[1] * 1e6
        res = ours[reference](A, b, n2)
        pipelined = ("reduction", "G[:,")    # the labels of the iterations' reductions (not the checks')
        waits = [e.end - e.start for e in res.reductions.events if e.kind == "wait" and e.label.startswith(pipelined)]
        blocked = comm.allreduce(float(np.mean(waits)), op=MPI.MAX)
        row["hidden"] = max(0.0, 1.0 - blocked / t_reduce) if t_reduce > 0 else None
        if comm.rank == 0:
            print("ROW " + json.dumps(row), flush=True)


# ------------------------------------------------------------------ the driver
def launcher_kind(mpiexec):
    out = subprocess.run([mpiexec, "--version"], capture_output=True, text=True).stdout
    return "openmpi" if "Open MPI" in out or "OpenRTE" in out else "other"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="*", default=SIZES + [TOTAL],
                        help=f"unknowns per rank ({TOTAL} means that many in total)")
    parser.add_argument("--ranks", type=int, nargs="*", default=[1, 2, 4])
    parser.add_argument("--transports", nargs="*", default=["shm", "tcp"], choices=["shm", "tcp"])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--family", choices=sorted(FAMILIES), default="cg")
    parser.add_argument("--no-petsc", action="store_true")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--timeout", type=float, default=1800)
    args = parser.parse_args()
    try:
        import petsc4py  # noqa: F401
        with_petsc = not args.no_petsc
    except ImportError:
        with_petsc = False
    if args.worker:
        worker(args.sizes, args.repeat, with_petsc, args.family)
        return 0
    print(report(measure(args.ranks, args.transports, args.sizes, args.repeat, with_petsc, args.timeout,
                         args.family), with_petsc, args.family))
    return 0


def runnable(transport, ranks, kind):
    """Whether :func:`measure` runs a configuration: TCP only between ranks, over Open MPI
    (``kind``, :func:`launcher_kind`)."""
    return not (transport == "tcp" and (ranks == 1 or kind != "openmpi"))


def measure(ranks_list, transports, sizes, repeat=3, with_petsc=True, timeout=1800, family="cg"):
    """The rows of one mpiexec run per (transport, ranks): time per iteration of every
    solver at every size, with the run's blocking Allreduce time (``allreduce_us``)."""
    mpiexec = shutil.which("mpiexec")
    kind = launcher_kind(mpiexec)
    env = mpiexec_env()
    rows = []
    for transport in transports:
        for ranks in ranks_list:
            if not runnable(transport, ranks, kind):
                continue
            command = [mpiexec, *(TCP if transport == "tcp" else []), "-n", str(ranks), sys.executable,
                       "-m", "benchmarks.strong_scaling_limit", "--worker", "--repeat", str(repeat),
                       "--family", family, "--sizes", *map(str, sizes)] + (["--no-petsc"] if not with_petsc else [])
            print(f"# {transport}, {ranks} rank(s): {' '.join(command[:-2 - len(sizes)])} ...",
                  file=sys.stderr, flush=True)
            out = subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout, cwd=ROOT)
            if out.returncode != 0:
                raise SystemExit(f"{' '.join(command)} failed:\n{out.stdout[-2000:]}{out.stderr[-4000:]}")
            rows += [dict(json.loads(line[4:]), transport=transport)
                     for line in out.stdout.splitlines() if line.startswith("ROW ")]
    return rows


def report(rows, with_petsc, family="cg"):
    from pipekrylov.compare import markdown_table
    import platform
    ours, petsc, reference, petsc_reference = FAMILIES[family]
    names = ours + (petsc if with_petsc else [])
    ratios = {"gmres": GMRES_RATIOS, "flexible": FLEXIBLE_RATIOS}.get(family, [
        ("p-cg compiled", "PETSc pipecg"), ("p-cg compiled", "PETSc cg"), ("gropp-cg", "PETSc groppcg"),
        ("p-cg-pr", "PETSc pipeprcg"), ("p-cg2", "PETSc pipecg2"), ("s(4)-cg", "PETSc pipecg"), ("b-cg", "PETSc cg-sr")])
    header = ["transport", "ranks", "unknowns/rank"] + names + [f"{reference} fixed", f"{petsc_reference} fixed"] * with_petsc
    header += [f"{a} / {b.split()[1]}" for a, b in ratios] * with_petsc + ["allreduce", "hidden"]
    table = []

    def us(v):
        return "-" if v is None else f"{v:.1f}"
    for r in rows:
        line = [r["transport"], r["ranks"], f"{r['local']:,}"] + [us(r.get(n)) for n in names]
        if with_petsc:
            line += [us(r.get(f"{reference} fixed")), us(r.get(f"{petsc_reference} fixed"))]
            for mine, ref in ratios:
                a, b = r.get(mine), r.get(ref)
                line.append("-" if a is None or not b else f"{a / b:.2f}")
        line += [us(r["allreduce_us"]) if r["ranks"] > 1 else "-",
                 "-" if r["hidden"] is None else f"{r['hidden']:.0%}"]
        table.append(line)
    cpu = cpu_name()
    problem = "2D convection-diffusion, restart 30" if family == "gmres" else "2D Poisson"
    return (f"time per iteration, us ({problem}, Jacobi; difference of N1 and N2 iterations, set-up "
            f"subtracted: 'fixed' is the per-solve rest), "
            f"{cpu}, {os.cpu_count()} cores, {platform.node()}\n" + markdown_table(header, table))


if __name__ == "__main__":
    sys.exit(main())
