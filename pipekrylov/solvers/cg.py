"""Classic preconditioned Conjugate Gradients: the baseline with two reductions per iteration.

The iteration runs in Python (:func:`_cg_loop`) or as one compiled function
(:class:`CompiledCG`, on :mod:`pipekrylov.parallel.runtime`), with the same results, bit
for bit: both sum the local dots in index order and call the same fused kernels.
"""
import functools

import numpy as np

from ..kernels import dot, fused_kernel
from ..parallel.runtime import EVENTS, RESUME_AFTER_TEST, RESUME_TOP, FloatSlot, IntSlot, runtime_source
from .common import Breakdown, SolverRun

__all__ = ["cg"]

def _direction():
    return fused_kernel(["p = z + beta*p"], scalars=["beta"])


def _update():
    return fused_kernel(["x = x + alpha*p", "r = r - alpha*q"], dots=["r.r"], scalars=["alpha"])


def cg(A, b, x0=None, *, rtol=1e-5, atol=0.0, maxiter=None, M=None, callback=None,
       comm=None, monitor=False, latency=0.0, loop="auto"):
    """Solve ``A x = b`` for symmetric positive definite ``A`` by preconditioned CG.  Collective.

    Parameters
    ----------
    A : DistributedCSR, or scipy.sparse matrix / 2-D array given whole on every rank
    b, x0 : ndarray
        Whole vectors, or this rank's slices when ``A`` is distributed.
    rtol, atol : float
        Stop when ``||r|| < max(atol, rtol * ||b||)`` (scipy's rule).
    maxiter : int
        Default ``10 n``.
    M : None, 'jacobi', 'bjacobi', 'ic0', 'ilu0', a preconditioner or an operator
        Approximates ``inv(A)``; must be SPD.
    callback : callable
        ``callback(xk)`` after each iteration.
    comm : mpi4py communicator
        Default: ``A.comm``, or COMM_WORLD for a matrix given whole.
    monitor : bool, file or callable
        Print PETSc-style ``  k KSP Residual norm ...`` lines on rank 0 (to the file), or
        call ``monitor(k, rnorm)`` on every rank.
    latency : float
        Injected reduction latency in seconds (emulating a large machine).
    loop : "auto", "compiled" or "python"
        ``"auto"``: the whole iteration compiled (A distributed, M None, "jacobi",
        "ilu0", "ic0" or "bjacobi"), else the Python loop; ``result.loop`` says which ran.

    Returns
    -------
    SolveResult
        Unpacks to ``(x, info)``: ``info == 0`` converged, ``> 0`` iterations done
        without converging, ``< 0`` breakdown (``diverged_indefinite_mat`` when
        ``p^T A p <= 0``, ``diverged_indefinite_pc`` when ``r^T M r < 0``).

    Notes
    -----
    Each iteration does one SpMV, one preconditioner application and two blocking
    global reductions: ``(p, Ap)``, then ``(r, r)`` fused with ``(r, z)``.
    """
    from .compiled import check_loop, run_on_loop
    check_loop(loop)
    run = SolverRun("cg", A, b, x0, rtol, atol, maxiter, M, callback, comm, monitor, latency, loop=loop)
    return run_on_loop(run, _cg_loop, _compiled_cg() if loop != "python" else None, loop)


def _cg_loop(run):
    matvec, reduce = run.A.matvec, run.reduction.allreduce
    x, b = run.x, run.b
    r = b - matvec(x)
    z = np.empty_like(r) if run.M is not None else r
    p, q = np.zeros_like(r), np.empty_like(r)
    update, direction = _update(), _direction()
    rr, rho_prev = dot(r, r), None
    for iteration in range(run.maxiter + 1):
        if run.M is not None:
            run.precondition(r, z)
            rr, rho = reduce([rr, dot(r, z)], "(r,r) (r,z)")
        else:
            rr = rho = reduce([rr], "(r,r)")[0]
        if run.converged(iteration, np.sqrt(rr)):
            return x, iteration, run.stop_reason()
        if iteration == run.maxiter:
            break
        if rho < 0:
            raise Breakdown("diverged_indefinite_pc", "preconditioner is not positive definite: (r, Mr) < 0")
        beta = 0.0 if rho_prev is None else rho / rho_prev
        direction({"p": p, "z": z}, {"beta": beta})
        matvec(p, q)
        pq = reduce([dot(p, q)], "(p,Ap)")[0]
        if not pq > 0:
            if not np.isfinite(pq):
                raise Breakdown("diverged_nanorinf", "(p, Ap) is not finite")
            raise Breakdown("diverged_indefinite_mat",
                            f"matrix is not positive definite: (p, Ap) = {pq:.3e} <= 0")
        alpha = rho / pq
        (rr,) = update({"x": x, "p": p, "r": r, "q": q}, {"alpha": alpha})
        rho_prev = rho
        run.iterations = iteration + 1
        run.iterated(x)
    return x, run.maxiter, "diverged_its"


# ---------------------------------------------------------------- the compiled loop
# S holds the scalars carried between calls: (r, r), (r, z), (r, z) of the last
# iteration, whether there is one, and the iteration the solve started at
_RR, _RHO, _RHO_PREV, _HAS_PREV, _FIRST = range(5)
_LABELS = ["(r,r) (r,z)", "(p,Ap)", "(r,r)"]


def cg_loop_source():
    """The compiled loop of classic CG (source text): ``begin`` (r = b - A x, (r, r))
    and ``loop``, which runs iterations until an event (see :mod:`pipekrylov.parallel.runtime`)."""
    I, F = IntSlot, FloatSlot
    direction, update = _direction(), _update()

    def call(kernel, name, scalar):
        return f"{name}({', '.join(kernel.vectors)}, {scalar}, out)"
    stop = {name: f"event = {EVENTS.index(name)}  # {name}" for name in EVENTS}
    return f"""# the compiled loop of: classic preconditioned CG
{runtime_source()}
from {direction._compiled.py_func.__module__} import fused as direction
from {update._compiled.py_func.__module__} import fused as update


def begin(x, b, r, S, I, F, A, P, R):
    spmv(x, r, A, R, I, F, False)
    for i in range(r.shape[0]):
        r[i] = b[i] - r[i]
    S[{_RR}] = dot(r, r)
    return 0


def loop(x, b, r, z, p, q, S, send, D, I, F, hist, trace, A, P, R):
    iteration = I[{I.ITERATION}]
    resume = I[{I.RESUME}]
    rr, rho, rho_prev = S[{_RR}], S[{_RHO}], S[{_RHO_PREV}]
    coef, out = np.zeros(1), np.zeros(1)
    event = -1
    while True:
        if resume == {RESUME_TOP}:
            if I[{I.HIST}] >= hist.shape[0] or I[{I.TRACE}] + 2 > trace.shape[0]:
                {stop["flush"]}
                break
            if I[{I.PC_KIND}] != 0:
                precondition(r, z, P, R, I, F, False)
                send[0] = rr
                send[1] = dot(r, z)
                count, label = 2, 0
            else:
                send[0] = rr
                count, label = 1, 2
            start(send, count, D, R, I, F, trace)
            t = I[{I.TRACE}]
            trace[t, 1] = trace[t, 2] = trace[t, 0]
            trace[t, 5] = label
            wait(R, I, F, trace)
            if I[{I.MPI_ERROR}] != 0:
                {stop["mpi_error"]}
                break
            if D[count] > 0.0:
                {stop["failed"]}
                break
            rr = D[0]
            rho = D[1] if count == 2 else rr
            rnorm = np.sqrt(rr)
            F[{F.RNORM}] = rnorm
            if I[{I.STOP_AT_TEST}] != 0:
                {stop["tested"]}
                break
            hist[I[{I.HIST}]] = rnorm
            I[{I.HIST}] += 1
            if not np.isfinite(rnorm):
                {stop["nanorinf"]}
                break
            if rnorm <= F[{F.ATOL}]:
                {stop["converged"]}
                break
        resume = {RESUME_TOP}
        if iteration == I[{I.MAXITER}]:
            {stop["maxiter"]}
            break
        if rho < 0:
            I[{I.CHECK}] = 0
            F[{F.VALUE}] = rho
            {stop["breakdown"]}
            break
        coef[0] = 0.0 if S[{_HAS_PREV}] == 0.0 else rho / rho_prev
        {call(direction, "direction", "coef")}
        spmv(p, q, A, R, I, F, False)
        send[0] = dot(p, q)
        start(send, 1, D, R, I, F, trace)
        t = I[{I.TRACE}]
        trace[t, 1] = trace[t, 2] = trace[t, 0]
        trace[t, 5] = 1
        wait(R, I, F, trace)
        if I[{I.MPI_ERROR}] != 0:
            {stop["mpi_error"]}
            break
        if D[1] > 0.0:
            {stop["failed"]}
            break
        pq = D[0]
        if not pq > 0:
            I[{I.CHECK}] = 2 if np.isfinite(pq) else 1
            F[{F.VALUE}] = pq
            {stop["breakdown"]}
            break
        coef[0] = rho / pq
        {call(update, "update", "coef")}
        rr = out[0]
        rho_prev = rho
        S[{_HAS_PREV}] = 1.0
        I[{I.DONE}] = iteration + 1
        if I[{I.STOP_EVERY}] != 0:
            iteration += 1
            {stop["iterated"]}
            break
        iteration += 1
    I[{I.ITERATION}] = iteration
    S[{_RR}], S[{_RHO}], S[{_RHO_PREV}] = rr, rho, rho_prev
    return event
"""


class CompiledCG:
    """Runs classic CG's compiled loop on a SolverRun, as :func:`_cg_loop` runs in Python."""

    def __init__(self):
        from .compiled import LoopFunctions
        self.source = cg_loop_source()
        self.functions = LoopFunctions(self.source, ["loop", "begin"])

    def __call__(self, run):
        from .compiled import BUFFERED, collect, loop_state, operands
        I, F = IntSlot, FloatSlot
        n = len(run.b)
        x, b, r = run.x, run.b, np.empty(n)
        z = np.empty(n) if run.M is not None else r
        p, q = np.zeros(n), np.empty(n)
        S = np.zeros(5)
        send, D = np.zeros(3), np.zeros(3)
        ints, floats = loop_state(run)
        hist, trace = np.empty(BUFFERED), np.empty((2 * BUFFERED, 6))
        A, P, R, key = operands(run)
        args = (x, b, r, z, p, q, S, send, D, ints, floats, hist, trace, A, P, R)
        loop, begin = self.functions.get(key, run.comm.Get_rank() == 0,
                                         [("loop", args), ("begin", (x, b, r, S, ints, floats, A, P, R))])
        begin(x, b, r, S, ints, floats, A, P, R)
        resume = RESUME_TOP
        while True:
            ints[I.RESUME] = resume
            floats[F.FLAG] = float(run.reduction.failure is not None)
            event = EVENTS[loop(*args)]
            collect(run, ints, floats, hist, trace, _LABELS)
            iteration = int(ints[I.ITERATION])
            resume = RESUME_TOP
            if event == "mpi_error":
                from mpi4py import MPI
                raise MPI.Exception(int(ints[I.MPI_ERROR]))
            if event == "failed":
                run.reduction.raise_failure()
            if event == "tested":
                if run.converged(iteration, float(floats[F.RNORM])):
                    return x, iteration, run.stop_reason()
                resume = RESUME_AFTER_TEST
            elif event == "converged":
                return x, iteration, run.stop_reason()
            elif event == "nanorinf":
                raise Breakdown("diverged_nanorinf", "residual norm is not finite")
            elif event == "maxiter":
                return x, run.maxiter, "diverged_its"
            elif event == "breakdown":
                raise _breakdown(int(ints[I.CHECK]), float(floats[F.VALUE]))
            elif event == "iterated":
                run.iterated(x)


def _breakdown(check, value):
    if check == 0:
        return Breakdown("diverged_indefinite_pc", "preconditioner is not positive definite: (r, Mr) < 0")
    if check == 1:
        return Breakdown("diverged_nanorinf", "(p, Ap) is not finite")
    return Breakdown("diverged_indefinite_mat", f"matrix is not positive definite: (p, Ap) = {value:.3e} <= 0")


@functools.lru_cache(maxsize=None)
def _compiled_cg():
    return CompiledCG()
