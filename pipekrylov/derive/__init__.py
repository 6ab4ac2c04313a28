"""The derivation framework: pipelined variants generated from method descriptions.

    >>> import pipekrylov
    >>> pcg = pipekrylov.pipelined("cg")                  # derived p-CG
    >>> x, info = pcg(A, b, rtol=1e-8, M="jacobi")         # the classic solvers' contract
    >>> print(pipekrylov.derive.derive("bicgstab"))        # the derived algorithm, readable

A derivation is a chain of pure passes, each from one form (:mod:`.forms`) to the next:
:mod:`.versions` -> :mod:`.auxiliaries` -> :mod:`.reductions` -> :mod:`.scheduling` ->
:mod:`.replacement`; every form prints readably.  :mod:`.codegen` turns the schedule into
its fused kernels, :mod:`.loopgen` into its loop (one function, printed from a syntax
tree), which :mod:`.solver` runs, compiled or interpreted.  A derivation is accepted only after the
derived solver reproduces the base method's residual history on a small random problem
(:func:`verify`).
"""
import functools

import numpy as np

from .method import Method
from .methods import BASE_METHODS
from .auxiliaries import find_segments
from .forms import NoPipelinedForm
from .reductions import fuse_reductions
from .replacement import residual_replacement
from .scheduling import schedule

__all__ = ["Method", "BASE_METHODS", "derive", "pipelined", "blocking", "loop_spec", "derived_spec", "verify", "check_depth",
           "DerivationError",
           "NoPipelinedForm"]


class DerivationError(ArithmeticError):
    """The derived method does not reproduce its base method: the derivation is rejected."""


def _method(method):
    if isinstance(method, Method):
        return method
    try:
        return BASE_METHODS[method]
    except KeyError:
        raise ValueError(f"unknown method {method!r}: choose from {', '.join(BASE_METHODS)} "
                         "or pass a pipekrylov.derive.Method") from None


@functools.lru_cache(maxsize=None)
def derive(method, depth=1, replace_every=None, replace_automatic=False, blocking=False):
    """The pipelined schedule of a base method (cached).  Pure; no MPI.

    Parameters
    ----------
    method : str or Method
    depth : int
        Pipeline depth: 1 (each reduction hidden behind one segment's operator work).
        Deeper pipelines are the deep templates' (:func:`pipekrylov.pipelining.algorithm`).
    replace_every, replace_automatic :
        Residual replacement, see :func:`.replacement.residual_replacement`.
    blocking : bool
        Not pipelined: each segment applies its operators as the base method does, then
        takes its dots in one blocking reduction (from the Chronopoulos-Gear form of CG,
        single-reduction CG: PETSc's ``-ksp_cg_single_reduction``).  No auxiliary vector,
        so nothing to replace.
    """
    check_depth(depth)
    method = _method(method)
    if depth != 1:
        raise ValueError(f"depth {depth}: deep pipelines exist for 'cg' (p(l)-CG) and 'gmres' "
                         "(p(l)-GMRES): pipekrylov.pipelined(method, depth)")
    if blocking and (replace_every or replace_automatic):
        raise ValueError(f"b-{method.name}: residual replacement is for the pipelined schedules (a blocking one "
                         "keeps no auxiliary vector to replace)")
    sym, aux = find_segments(method, blocking)
    sched = schedule(fuse_reductions(aux), blocking)
    return residual_replacement(sched, replace_every, replace_automatic)


@functools.lru_cache(maxsize=None)
def _generated(sched):
    """The generated code of a schedule (its fused kernels and scalar steps), once."""
    from .codegen import generate
    return generate(sched)


def _loop(sched):
    """The loop of a schedule (generated and imported once per process; compiled at its
    first solve)."""
    from .solver import derived_loop
    return derived_loop(_generated(sched))


def pipelined(method, depth=1, *, replace_every=None, replace_automatic=False, check=True):
    """The derived pipelined solver for ``method`` (depth 1), with the classic solvers'
    signature.  (``pipekrylov.pipelined`` also gives the deep templates, p(l)-CG and
    p(l)-GMRES: :mod:`pipekrylov.pipelining`.)

    ``solver(A, b, x0=None, *, rtol, atol, maxiter, M, callback, comm, monitor, latency,
    loop)`` returns a SolveResult (unpacks to ``(x, info)``); ``solver.schedule`` is the
    derived algorithm, ``solver.source`` its kernels and ``solver.loop_source`` its loop.
    With ``check`` the derivation is verified first (:func:`verify`).
    ``solver.spec`` is what :class:`pipekrylov.Solver` takes for many solves.

    ``loop``: ``"compiled"`` runs the whole iteration as one compiled function (A a
    DistributedCSR or a matrix, M None, "jacobi", "ilu0", "ic0", "bjacobi"), ``"python"``
    the same function interpreted; ``"auto"`` (default) the compiled loop where it
    applies.  Both give the same residual norms, bit for bit; ``result.loop`` says which ran.
    """
    check_depth(depth)
    method = _method(method)
    sched = derive(method, depth, replace_every, replace_automatic)
    if check:
        verify(method, depth)
    return _function(sched, f"Pipelined {method.title}")


def blocking(method, *, check=True):
    """The derived blocking solver for ``method`` (:func:`derive`'s ``blocking``: from
    ``"cg"``, single-reduction CG), as :func:`pipelined` gives the pipelined one."""
    method = _method(method)
    sched = derive(method, blocking=True)
    if check:
        verify(method, blocking=True)
    return _function(sched, f"{method.title} with its dots in one blocking reduction per point")


def _function(sched, title):
    """The classic solvers' signature over a schedule's loop."""
    spec = _loop(sched)

    def solver(A, b, x0=None, *, rtol=1e-5, atol=0.0, maxiter=None, M=None, callback=None,
               comm=None, monitor=False, latency=0.0, loop="auto"):
        from ..solvers.solver import solve_once
        return solve_once(spec, A, b, x0, rtol=rtol, atol=atol, maxiter=maxiter, M=M, callback=callback,
                          comm=comm, monitor=monitor, latency=latency, loop=loop)

    solver.__name__ = sched.name.replace("-", "_")
    solver.__doc__ = f"{title}, derived by pipekrylov.derive.\n\nArguments and result as pipekrylov.cg.\n\n{sched}"
    solver.schedule = sched
    solver.source = _generated(sched).source
    solver.loop_source = spec.source
    solver.method = sched.method
    solver.spec = spec
    return solver


def loop_spec(method, replace_every=None, replace_automatic=False, blocking=False):
    """The verified loop of a depth-1 method (a :class:`~pipekrylov.loops.LoopSpec`, what
    :class:`pipekrylov.Solver` runs), pipelined or ``blocking`` (:func:`derive`)."""
    method = _method(method)
    verify(method, blocking=blocking)
    return _loop(derive(method, 1, replace_every, replace_automatic, blocking))


derived_spec = loop_spec


def check_depth(depth):
    if isinstance(depth, bool) or not isinstance(depth, (int, np.integer)) or depth < 1:
        raise ValueError(f"depth must be a positive integer, got {depth!r}")


@functools.lru_cache(maxsize=None)
def verify(method, depth=1, n=40, iterations=12, tolerance=1e-8, blocking=False):
    """Accept a derivation only if it reproduces the base method on a random problem.

    Runs the base description directly (:func:`.interpret.run_base`) and the generated
    pipelined solver on a random well-conditioned problem of size ``n`` (symmetric
    positive definite when the method needs it, with a Jacobi preconditioner) and
    compares the residual norms of the first ``iterations`` iterations; they agree to
    rounding when the derivation is right, and differ at O(1) when it is not.
    """
    from mpi4py import MPI
    import scipy.sparse as sp
    from .interpret import run_base
    method = _method(method)
    rng = np.random.default_rng(7)
    B = sp.random(n, n, density=0.2, random_state=rng, data_rvs=rng.standard_normal)
    symmetric = method.name in ("cg", "cg-hs", "cg-gropp", "cg-pr", "cr")
    A = (B @ B.T if symmetric else B) + sp.diags(rng.uniform(2 * np.sqrt(n), 3 * np.sqrt(n), n))
    A = sp.csr_matrix(A)
    b = rng.standard_normal(n)
    dinv = 1.0 / A.diagonal()
    base = run_base(method, A, b, M=lambda v: dinv * v, iterations=iterations)
    from ..solvers.solver import Solver
    solver = Solver(A, _loop(derive(method, depth, None, False, blocking)), M="jacobi", comm=MPI.COMM_SELF,
                    loop="python")
    derived = np.array(solver.solve(b, rtol=0.0, atol=0.0, maxiter=iterations).residual_norms)
    # compare while the residual is well above rounding: near eps the two round differently
    k = min(len(base), len(derived), int(np.argmax(np.r_[base, 0] < 1e-6 * base[0])))
    error = np.max(np.abs(derived[:k] - base[:k]) / base[:k])
    if k < 4 or not error < tolerance:
        raise DerivationError(f"derived {method.name} does not reproduce the base method: residual "
                              f"norms differ by {error:.2e} (relative) over {k} iterations")
    return error
