"""What a small solve pays besides its iterations, on one rank: a whole solve of a
backward Euler step (about 10 iterations) through a ``Solver`` set up once, its Python
part (the same solve with the loop replaced by a stand-in that reports the same
convergence at once), Numba's entry into the loop (an empty function of the loop's
arguments: unboxing them), the same solve through the PETSc route (our KSP type from
petsc4py) and PETSc's own KSPSolve on a KSP set up once:

    python -m benchmarks.solve_overhead
    python -m benchmarks.solve_overhead --sizes 256 --methods p-cg

Each figure is the best over rounds of batches of calls, the candidates interleaved
(the host's noise falls on all alike); set-up is not timed.  Printed per row: us per
solve, and ours / PETSc's for the whole solves.
"""
import argparse
import importlib.util
import sys
import time

import numpy as np

PETSC_KIND = {"cg": "cg", "p-cg": "pipecg"}
CONTEXT = {"cg": "CG", "p-cg": "PipeCG"}


def candidates(total, method, rtol=1e-8):
    """``(iterations, {name: call})`` for one size and method.  One rank."""
    import numba
    from mpi4py import MPI
    import pipekrylov as pk
    from pipekrylov.kernels.compile import compile_for
    from pipekrylov.runtime import layout as L
    from pipekrylov.timing import calibrate_dt, heat
    comm = MPI.COMM_SELF
    A, u0 = heat(comm, total, calibrate_dt(comm, total, 10))
    b = 1.5 * u0
    solver, python = pk.Solver(A, method, M="jacobi"), pk.Solver(A, method, M="jacobi")
    res = solver.solve(b, u0, rtol=rtol)
    its = res.iterations

    def stand_in(*args):   # the loop's buffers and state as the real solve leaves them
        python.I[L.DONE], python.I[L.HIST] = its, res.residual_norms.size
        python.I[L.TRACE] = res.reductions.count
        return L.CONVERGED
    python.entry = stand_in

    @numba.njit
    def empty(W, x, b, S, I, F, hist, trace, A, P, R):
        return 0
    args = solver._arguments(u0.copy(), b)
    entry = compile_for(empty, args)
    calls = {"solve": lambda: solver.solve(b, u0, rtol=rtol),
             "python": lambda: python.solve(b, u0, rtol=rtol),
             "entry": lambda: entry(*args)}
    if importlib.util.find_spec("petsc4py") is None:
        return its, calls
    from pipekrylov import petsc as pkpetsc
    mat = pkpetsc.aij(A)
    for name, kind in (("PETSc route", getattr(pkpetsc, CONTEXT[method])), ("PETSc", PETSC_KIND[method])):
        ksp = pkpetsc.make_ksp(mat, kind, "jacobi", rtol=rtol, max_it=10000, unpreconditioned=True)
        ksp.setInitialGuessNonzero(True)
        x, rhs = mat.createVecs()
        rhs.array[:] = b

        def call(ksp=ksp, x=x, rhs=rhs):
            x.array[:] = u0
            ksp.solve(rhs, x)
        call()
        if ksp.getIterationNumber() != its:
            print(f"# {name} takes {ksp.getIterationNumber()} iterations, ours {its}", file=sys.stderr)
        calls[name] = call
    return its, calls


def best(calls, rounds, batch):
    """Best time per call (us) of each, interleaved rounds of ``batch`` calls."""
    out = {name: np.inf for name in calls}
    for _ in range(rounds):
        for name, call in calls.items():
            t0 = time.perf_counter()
            for _ in range(batch):
                call()
            out[name] = min(out[name], (time.perf_counter() - t0) / batch * 1e6)
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="*", default=[256, 1024, 4096])
    parser.add_argument("--methods", nargs="*", default=["cg", "p-cg"], choices=list(PETSC_KIND))
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--batch", type=int, default=500)
    args = parser.parse_args()
    import platform
    from benchmarks.common import cpu_name
    from pipekrylov.compare import markdown_table
    names = ["solve", "python", "entry", "PETSc route", "PETSc"]
    rows = []
    for total in args.sizes:
        for method in args.methods:
            its, calls = candidates(total, method)
            t = best(calls, args.rounds, args.batch)
            rows.append([method, f"{total:,}", its] + [f"{t[n]:.1f}" if n in t else "-" for n in names] +
                        [f"{t['solve'] / t['PETSc']:.2f}" if "PETSc" in t else "-",
                         f"{t['PETSc route'] / t['PETSc']:.2f}" if "PETSc" in t else "-"])
    print(f"us per solve, one rank, best of {args.rounds} rounds of {args.batch}; {cpu_name()}, "
          f"{platform.node()}")
    print(markdown_table(["method", "unknowns", "its", "solve", "its Python", "loop entry", "PETSc route",
                          "PETSc", "solve / PETSc", "PETSc route / PETSc"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
