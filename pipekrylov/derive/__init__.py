"""The derivation framework: pipelined variants generated from method descriptions.

    >>> import pipekrylov
    >>> pcg = pipekrylov.pipelined("cg")                  # derived p-CG
    >>> x, info = pcg(A, b, rtol=1e-8, M="jacobi")         # the classic solvers' contract
    >>> print(pipekrylov.derive.derive("bicgstab"))        # the derived algorithm, readable

A derivation is a chain of pure passes, each from one form (:mod:`.forms`) to the next:
:mod:`.versions` -> :mod:`.auxiliaries` -> :mod:`.reductions` -> :mod:`.scheduling` ->
:mod:`.replacement`; every form prints readably.  :mod:`.codegen` turns the schedule into
kernels and source, which :mod:`.pyloop` runs in Python and :mod:`.compiled` as one
compiled loop.  A derivation is accepted only after the
derived solver reproduces the base method's residual history on a small random problem
(:func:`verify`).
"""
import functools
import hashlib

import numpy as np

from .method import Method
from .methods import BASE_METHODS
from .auxiliaries import find_segments
from .forms import NoPipelinedForm
from .reductions import fuse_reductions
from .replacement import residual_replacement
from .scheduling import schedule

__all__ = ["Method", "BASE_METHODS", "derive", "pipelined", "loop", "verify", "check_depth", "DerivationError",
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
def derive(method, depth=1, replace_every=None, replace_automatic=False):
    """The pipelined schedule of a base method (cached).  Pure; no MPI.

    Parameters
    ----------
    method : str or Method
    depth : int
        Pipeline depth: 1 (each reduction hidden behind one segment's operator work).
        Deeper pipelines are the deep templates' (:func:`pipekrylov.pipelining.algorithm`).
    replace_every, replace_automatic :
        Residual replacement, see :func:`.replacement.residual_replacement`.
    """
    check_depth(depth)
    method = _method(method)
    if depth != 1:
        raise ValueError(f"depth {depth}: deep pipelines exist for 'cg' (p(l)-CG) and 'gmres' "
                         "(p(l)-GMRES): pipekrylov.pipelined(method, depth)")
    sym, aux = find_segments(method)
    sched = schedule(fuse_reductions(aux))
    return residual_replacement(sched, replace_every, replace_automatic)


@functools.lru_cache(maxsize=None)
def _generated(sched):
    """The Python loop of a schedule's generated code, once per schedule."""
    from .codegen import generate
    from .pyloop import PythonLoop
    return PythonLoop(generate(sched))


@functools.lru_cache(maxsize=None)
def _compiled(sched):
    """(the compiled loop's driver, None), or (None, the exception of a method the loop
    generator cannot take), once per schedule."""
    from .compiled import CompiledSolver
    try:
        return CompiledSolver(_generated(sched)), None
    except Exception as exc:  # noqa: BLE001 - a user's Method the generator cannot take
        return None, exc


def _compiled_source(sched):
    compiled, error = _compiled(sched)
    if error is not None:
        raise error
    return compiled.source


def pipelined(method, depth=1, *, replace_every=None, replace_automatic=False, check=True):
    """The derived pipelined solver for ``method`` (depth 1), with the classic solvers'
    signature.  (``pipekrylov.pipelined`` also gives the deep templates, p(l)-CG and
    p(l)-GMRES: :mod:`pipekrylov.pipelining`.)

    ``solver(A, b, x0=None, *, rtol, atol, maxiter, M, callback, comm, monitor, latency,
    loop)`` returns a SolveResult (unpacks to ``(x, info)``); ``solver.schedule`` is the
    derived algorithm and ``solver.source`` the generated code.  With ``check`` the
    derivation is verified first (:func:`verify`).

    ``loop``: ``"compiled"`` runs the whole iteration as one compiled function
    (:mod:`.compiled`; A a DistributedCSR or a matrix, M None, "jacobi", "ilu0", "ic0", "bjacobi"),
    ``"python"`` the generated Python loop; ``"auto"`` (default) the compiled loop
    where it applies.  Both give the same residual norms, bit for bit; ``result.loop``
    says which ran.
    """
    check_depth(depth)
    method = _method(method)
    sched = derive(method, depth, replace_every, replace_automatic)
    generated = _generated(sched)
    if check:
        verify(method, depth)
    digest = "source sha256 " + hashlib.sha256(generated.code.source.encode()).hexdigest()[:16]

    def solver(A, b, x0=None, *, rtol=1e-5, atol=0.0, maxiter=None, M=None, callback=None,
               comm=None, monitor=False, latency=0.0, loop="auto"):
        from ..solvers.common import SolverRun
        from ..solvers.compiled import check_loop, run_on_loop
        check_loop(loop)
        # each rank derives on its own: the digest of the generated source is compared
        # with the arguments, so that the ranks run the same algorithm
        run = SolverRun(f"p-{method.name}", A, b, x0, rtol, atol, maxiter, M, callback, comm,
                        monitor, latency, loop=loop, derivation=digest)
        compiled, error = _compiled(sched) if loop != "python" else (None, None)   # alike on every rank
        if error is not None and loop == "compiled":
            raise error
        return run_on_loop(run, generated, compiled, loop, why=error and str(error))

    solver.__name__ = f"p_{method.name}"
    solver.__doc__ = (f"Pipelined {method.title}, derived by pipekrylov.derive.\n\n"
                      "Arguments and result as pipekrylov.cg.\n\n" + str(sched))
    solver.schedule = sched
    solver.source = generated.code.source
    solver.method = method
    solver.compiled_source = lambda: _compiled_source(sched)
    return solver


def loop(method, replace_automatic=False, loop="auto"):
    """The verified loop of a depth-1 method, ``run_loop(run, state=None) -> (x,
    iterations, reason)`` on a :class:`~pipekrylov.solvers.common.SolverRun` (which a
    deep solver hands over to, with ``state`` a warm start): the compiled loop where
    ``loop`` and the solve allow (as :func:`pipelined`), else the Python loop."""
    from ..solvers.compiled import LoopCompileError, check_loop, loop_choice
    check_loop(loop)
    method = _method(method)
    verify(method)
    sched = derive(method, 1, None, replace_automatic)
    python = _generated(sched)
    compiled, error = _compiled(sched) if loop != "python" else (None, None)

    def run_loop(run, state=None):
        if loop_choice(run, loop, error and str(error)) == "compiled":
            try:
                return compiled(run, state)
            except LoopCompileError:   # before any collective, on every rank alike
                if loop == "compiled":
                    raise
        return python(run, state)
    return run_loop


def check_depth(depth):
    if isinstance(depth, bool) or not isinstance(depth, (int, np.integer)) or depth < 1:
        raise ValueError(f"depth must be a positive integer, got {depth!r}")


@functools.lru_cache(maxsize=None)
def verify(method, depth=1, n=40, iterations=12, tolerance=1e-8):
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
    symmetric = method.name in ("cg", "cg-hs", "cr")
    A = (B @ B.T if symmetric else B) + sp.diags(rng.uniform(2 * np.sqrt(n), 3 * np.sqrt(n), n))
    A = sp.csr_matrix(A)
    b = rng.standard_normal(n)
    dinv = 1.0 / A.diagonal()
    base = run_base(method, A, b, M=lambda v: dinv * v, iterations=iterations)
    plain = derive(method, depth, None, False)
    result = _generated(plain)
    from ..solvers.common import SolverRun
    run = SolverRun("verify", A, b, None, 0.0, 0.0, iterations, "jacobi", None, MPI.COMM_SELF)
    derived = np.array(run.run(result).residual_norms)
    # compare while the residual is well above rounding: near eps the two round differently
    k = min(len(base), len(derived), int(np.argmax(np.r_[base, 0] < 1e-6 * base[0])))
    error = np.max(np.abs(derived[:k] - base[:k]) / base[:k])
    if k < 4 or not error < tolerance:
        raise DerivationError(f"derived {method.name} does not reproduce the base method: residual "
                              f"norms differ by {error:.2e} (relative) over {k} iterations")
    return error
