"""One problem through PETSc's KSPs and pipekrylov's counterparts, in one table.

    mpiexec -n 1 python -m pipekrylov compare [--n 1000] [--depth 2] [--max-it 5000]
    mpiexec -n 2 python -m pipekrylov compare [--only cg pipelcg]

2D Poisson (n^2 unknowns, b = 1), Jacobi PC, rtol 1e-8; PETSc's CG and BiCGStab variants
test the unpreconditioned residual norm (as ours do); GMRES variants are right
preconditioned.  Ours run as PETSc KSPs (-ksp_type python) on the same Mat, Vecs and PC.
Columns: iterations, converged reason (negative: diverged; -3 is the iteration cap, which
GMRES(30) reaches on large Poisson problems), true relative residual, time per iteration
(KSPSolve's time over its iterations, the best of ``--repeat`` solves after an untimed one,
which loads or compiles what it runs), time blocked in reductions per iteration (ours
only: PETSc does not report it) and the loop that ran (C: PETSc's; compiled or python).
PETSc's pipelcg runs at the same depth with its default shifts (lmin = lmax = 0, the
monomial basis); ours (PipeLCG) estimates its own.  PipeCG runs without and with
automatic residual replacement (``-ksp_pipekrylov_replacement``).  ``--only`` keeps the
rows of the PETSc KSPs named and their counterparts.
"""
import argparse
import sys
import time

__all__ = ["compare", "markdown_table"]


def _pairs():
    import pipekrylov.petsc as pkp
    # (PETSc's KSP, our counterparts as (context, extra options))
    return [("cg", [(pkp.CG, {})]),
            ("pipecg", [(pkp.PipeCG, {}), (pkp.PipeCG, {"ksp_pipekrylov_replacement": True})]),
            ("pipecgrr", []), ("pipelcg", [(pkp.PipeLCG, {})]), ("bcgs", [(pkp.BiCGStab, {})]),
            ("pipebcgs", [(pkp.PipeBiCGStab, {})]), ("gmres", [(pkp.GMRES, {})]),
            ("pgmres", [(pkp.PipeLGMRES, {})])]


def markdown_table(header, rows):
    widths = [max(len(str(h)), *(len(str(r[i])) for r in rows)) for i, h in enumerate(header)]
    lines = ["| " + " | ".join(str(h).ljust(w) for h, w in zip(header, widths)) + " |",
             "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    lines += ["| " + " | ".join(str(v).ljust(w) for v, w in zip(r, widths)) + " |" for r in rows]
    return "\n".join(lines)


def _run(A, b, ksp_type, context, depth, max_it, pc, extra=None, repeat=3):
    from mpi4py import MPI
    from pipekrylov.petsc import make_ksp
    comm = A.getComm()
    if context is None:
        options = [("ksp_pipelcg_pipel", depth)]
        ksp = make_ksp(A, ksp_type, pc, rtol=1e-8, max_it=max_it, prefix="compare_", options=options,
                       unpreconditioned=ksp_type in ("cg", "pipecg", "pipecgrr", "bcgs", "pipebcgs"),
                       right="bcgs" in ksp_type or "gmres" in ksp_type)
    else:
        options = [("ksp_pipekrylov_depth", depth if ksp_type == "pipelcg" else 1), *(extra or {}).items()]
        ksp = make_ksp(A, context, pc, rtol=1e-8, max_it=max_it, prefix="compare_", options=options)
    x = b.duplicate()
    elapsed = []
    for _ in range(1 + repeat):   # the first solve loads or compiles what it runs: not timed
        x.set(0.0)
        comm.tompi4py().Barrier()
        t0 = time.perf_counter()
        ksp.solve(b, x)
        elapsed.append(comm.tompi4py().allreduce(time.perf_counter() - t0, op=MPI.MAX))
    elapsed = min(elapsed[1:])
    its = max(ksp.getIterationNumber(), 1)
    r = b.duplicate()
    A.mult(x, r)
    r.aypx(-1.0, b)
    blocked = None
    loop = "C"
    if context is not None:
        result = ksp.getPythonContext().last_result
        blocked = comm.tompi4py().allreduce(result.timings["reductions_blocked"], op=MPI.MAX) / its
        loop = result.loop
    row = [its, int(ksp.getConvergedReason()), f"{r.norm() / b.norm():.1e}", f"{elapsed / its * 1e6:.1f}",
           "-" if blocked is None else f"{blocked * 1e6:.1f}", loop]
    ksp.destroy()
    return row


def _unknown_ksp(only):
    """What is wrong with ``--only``, or None."""
    known = [ksp_type for ksp_type, _ in _pairs()]
    unknown = set(only or ()) - set(known)
    if unknown:
        return f"--only: unknown KSP {', '.join(sorted(unknown))}; choose from {', '.join(known)}"
    return None


def compare(comm, n, depth=2, max_it=5000, pc="jacobi", only=None, repeat=3, progress=None):
    """The table's rows for 2D Poisson n x n on ``comm`` (``only``: those PETSc KSP types
    and our counterparts).  ``progress``: a stream told of each case as it starts (a
    whole table takes minutes).  Collective."""
    import pipekrylov as pk
    from pipekrylov.petsc import aij
    pairs = _pairs()
    unknown = _unknown_ksp(only)
    if unknown:   # (a SystemExit: the library's callers have it so)
        raise SystemExit(unknown)
    # PETSc's KSP (context None), then our counterparts
    cases = [(ksp_type, context, extra) for ksp_type, ours in pairs if not only or ksp_type in only
             for context, extra in [(None, {})] + ours]
    A = aij(pk.poisson2d(comm, n))
    b = A.createVecRight()
    b.set(1.0)
    table = []
    for number, (ksp_type, context, extra) in enumerate(cases, 1):
        label = (f"PETSc {ksp_type}" if context is None else
                 f"pipekrylov.petsc.{context.__name__}" + "".join(f" -{key}" for key in extra))
        if progress is not None:
            print(f"compare: [{number}/{len(cases)}] {label} ...", file=progress, flush=True)
        table.append([label] + _run(A, b, ksp_type, context, depth, max_it, pc, extra, repeat))
    A.destroy()
    b.destroy()
    return table


def main(argv=None):
    parser = argparse.ArgumentParser(prog="pipekrylov compare", description=__doc__.splitlines()[0])
    add_arguments(parser)
    return command(parser.parse_args(argv))


def add_arguments(parser):
    parser.add_argument("--n", type=int, default=1000, help="grid size: n^2 unknowns")
    parser.add_argument("--depth", type=int, default=2, help="pipeline depth of pipelcg and ours")
    parser.add_argument("--max-it", type=int, default=5000)
    parser.add_argument("--pc", default="jacobi")
    parser.add_argument("--only", nargs="+", metavar="KSP", help="only these PETSc KSP types and ours")
    parser.add_argument("--repeat", type=int, default=3, help="timed solves (the best is shown) after one untimed")


def check(args, comm):
    """What can be refused before the first solve (a PETSc error would be a traceback)."""
    from pipekrylov.parallel.commandline import at_least
    from pipekrylov.problems import check_problem_memory
    at_least(2, n=args.n)
    at_least(1, depth=args.depth, max_it=args.max_it, repeat=args.repeat)
    try:
        from petsc4py import PETSc
    except ImportError:
        raise ValueError("compare runs PETSc's KSP types beside ours: it needs petsc4py (and PETSc), "
                         "which this Python does not have (the README's Debian route installs them)") from None
    unknown = _unknown_ksp(args.only)
    if unknown:
        raise ValueError(unknown)
    pc = PETSc.PC().create(PETSc.COMM_SELF)
    try:
        pc.setType(args.pc)
    except PETSc.Error:
        raise ValueError(f"--pc {args.pc}: not a preconditioner of this PETSc (PCSetType fails); "
                         "e.g. none, jacobi, bjacobi, ilu, icc, sor") from None
    finally:
        pc.destroy()
    check_problem_memory(f"poisson2d:{args.n}", comm, label=f"--n {args.n}")


def command(args):
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    check(args, comm)
    table = compare(comm, args.n, args.depth, args.max_it, args.pc, args.only, args.repeat,
                    progress=sys.stderr if comm.rank == 0 else None)
    if comm.rank == 0:
        print(f"2D Poisson {args.n}x{args.n} ({args.n ** 2 // comm.size} unknowns per rank), {args.pc}, "
              f"rtol 1e-8, {comm.size} rank(s); best of {args.repeat} solves after one untimed")
        print(markdown_table(["KSP", "iterations", "reason", "true rel. residual", "us / iteration",
                              "blocked us / iteration", "loop"], table))
    return 0
