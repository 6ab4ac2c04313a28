"""A solver set up once and solving many right-hand sides: :class:`Solver`.

In the strong-scaling limit a solve takes a few microseconds per iteration and users make
many of them in a row (time steps, Newton steps, Parareal's propagators), so what a solve
pays besides its iterations matters as much as the iterations.  The set-up does once all
that does not depend on ``b``: the ranks' agreement on the arguments (one allgather),
the matrix's distribution and halo plan, the preconditioner's factor, the loop's
compilation (or loading from the cache), its operands, workspace, state and buffers.  A
solve then checks its own arguments locally, calls the loop (one call without a monitor
or a callback), and packs the result; the ranks' agreement on its arguments, ``||b||``
and a failure on any rank travel in the reductions the loop makes anyway.
"""
import collections
import contextlib
import threading
import time
import zlib

import numpy as np

from ..parallel import collective_check
from ..precond import Identity, PreconditionerFailure, PythonOperands, make_preconditioner
from ..runtime import layout as L
from .driver import drive, result
from .inputs import (SolveCall, WholeOperator, as_sparse, check_latency, check_same_on_every_rank, distributed,
                     local_vector, result_dtype, solve_comm, whole_checksum, whole_operator)

__all__ = ["Solver", "LOOPS", "BUFFERED", "POKE_ROWS", "LoopCompileError"]

LOOPS = ("auto", "compiled", "python")
BUFFERED = 2048   # iterations of residual norms and trace kept in the loop between two hand-backs
POKE_ROWS = 4096  # rows of the SpMV and Jacobi between two MPI_Test pokes of a reduction in flight


class LoopCompileError(TypeError):
    """Numba cannot type a method's compiled loop (``loop="auto"`` then runs it interpreted)."""


def _world():
    from mpi4py import MPI
    return MPI.COMM_WORLD


class Solver:
    """A Krylov method set up for one matrix, to solve many systems with it.  Collective.

    >>> s = pk.Solver(A, "p-cg", M="jacobi")
    >>> for step in range(100):
    ...     u, info = s.solve(u, x0=u, rtol=1e-8)     # each step: (I + dt L) u_new = u

    Parameters
    ----------
    A : DistributedCSR, an operator with its interface, or a scipy.sparse matrix / 2-D
        array given whole on every rank (distributed once, here)
    method : str
        ``"cg"``, ``"cr"``, ``"bicgstab"`` (classic); see :func:`methods`.
    M : None, 'jacobi', 'bjacobi', 'ic0', 'ilu0', a preconditioner or an operator
    comm : mpi4py communicator (default ``A.comm``, or COMM_WORLD for a matrix given whole)
    loop : "auto", "compiled" or "python"
        Where the iterations run: compiled (A a DistributedCSR or a matrix, M None or one
        of the named ones), or the same loop interpreted (operators only Python applies);
        ``"auto"`` the compiled loop where it applies.  ``result.loop`` says which ran.
    latency : float
        Injected reduction latency in seconds (a larger machine's, on a small one).

    A solve's arguments and result are those of :func:`pipekrylov.cg`.
    """

    def __init__(self, A, method="cg", *, M=None, comm=None, loop="auto", latency=0.0, **options):
        from ..loops import LoopSpec
        from .methods import loop_spec
        self.t0 = time.perf_counter()
        name = _name(method)
        self.comm = comm = _solve_comm(method, A, comm)
        self._ranks = comm.Get_size()
        self._comm_key = _handle(comm)
        with collective_check(comm, name):   # arguments one rank alone may have got wrong
            if loop not in LOOPS:
                raise ValueError(f"loop must be one of {', '.join(map(repr, LOOPS))}, got {loop!r}")
            if isinstance(method, Refused):
                raise method.error
            spec = method if isinstance(method, LoopSpec) else loop_spec(method, **options)
            self.latency = check_latency(latency)
        self.spec = self.spec_asked = spec
        self.method = spec.name
        # (a generated loop's key holds a digest of its source: each rank generates its own)
        check_same_on_every_rank(comm, self.method, A, M=M, loop=loop, latency=latency, method_key=spec.key)
        self.loop_asked = loop
        self._set_matrix(A, M)
        self.setup_time = time.perf_counter() - self.t0

    def update(self, A, M=None):
        """Set up for a new matrix ``A`` (new values, the same pattern or another; whole or
        distributed as the first) with ``M`` as at construction unless given: the
        partition, the halo plan, the preconditioner's factor and the operands anew; the
        compiled loop, the workspace and the buffers are kept where they fit.  Collective."""
        self.t0 = time.perf_counter()
        check_same_on_every_rank(self.comm, self.method, A, M=M)
        self._set_matrix(A, self.M_given if M is None else M)
        self.setup_time = time.perf_counter() - self.t0

    def _set_matrix(self, A, M):
        self.whole = not distributed(A)
        if self.whole and whole_operator(A):   # a LinearOperator given whole: applied whole on every rank
            A = WholeOperator(A, self.comm)
        elif self.whole:
            from ..matrix.distributed import DistributedCSR
            A = DistributedCSR.from_scipy(as_sparse(A), self.comm)
        same_size = getattr(self, "partition", None) is not None and self.partition.nlocal == A.partition.nlocal
        spec = self.spec_asked.fitted(A.partition.n)   # GMRES's restart, at most n
        same_size = same_size and spec is self.spec
        self.spec = spec
        self.A, self.M_given = A, M
        self.partition = A.partition
        self.failures = []   # what user code raised on this rank during the current solve
        self.pc_error = None
        was_preconditioned = getattr(self, "M", None) is not None
        try:
            self.M = make_preconditioner(M, A)
        except PreconditionerFailure as exc:
            self.M, self.pc_error = None, exc
        self._choose_loop(self.loop_asked)
        # a preconditioner given or taken away changes the workspace and the loop's flag
        if not same_size or not hasattr(self, "W") or (self.M is not None) != was_preconditioned:
            self._allocate()
        elif self.loop == "compiled":
            self.entry = self._compile()   # the same kinds of operands: Numba's dispatcher has it
        for kept in ("_norm_inf_a", "_applies", "_allreduce"):   # made for the operands and buffers before
            self.__dict__.pop(kept, None)

    # ---------------------------------------------------------------- set-up
    def _choose_loop(self, loop):
        from ..runtime.operators import compiled
        self.A_operands = _operands(self.A, self.failures)
        self.P_operands = (self.M or Identity()).operands(self.failures)
        why = None
        if not compiled(self.A_operands):
            why = f"A is a {type(self.A).__name__}, not a DistributedCSR or a matrix"
        elif not compiled(self.P_operands):
            why = "M is a user operator (the compiled loop applies 'jacobi', 'ilu0', 'ic0' or none)"
        if loop == "compiled" and why is not None:
            raise ValueError(f"{self.method}: loop='compiled' cannot run this solve: {why}")
        self.loop = "compiled" if loop != "python" and why is None else "python"

    def _allocate(self):
        from ..runtime.reduce import reductions
        spec, n = self.spec, self.partition.nlocal
        self.R = reductions(self.comm, spec.slots, spec.width)
        self.I, self.F = np.zeros(L.INTS, np.int64), np.zeros(L.FLOATS)
        # what a solve starts from (it sets its own arguments over a copy)
        self._I0, self._F0 = np.zeros(L.INTS, np.int64), np.zeros(L.FLOATS)
        self._I0[L.POKE_ROWS], self._I0[L.RANKS] = POKE_ROWS, self._ranks
        self._I0[L.PRECONDITIONED] = self.M is not None
        self._I0[L.RESUME] = L.BEGIN
        self._F0[L.LATENCY] = self.latency
        self.hist = np.empty(BUFFERED * spec.norms)
        # the loop's iterations, and room for what a start-up, a confirmation or a hook adds
        self.trace = np.empty((BUFFERED * spec.reductions + 64, 6))
        self.W = spec.workspace(n, self.M is not None)
        self.S = np.zeros(max(1, spec.scalars))
        self.entry = spec.interpreted
        if self.loop == "compiled":
            self.entry = self._compile()


    def _compile(self):
        """The compiled loop's entry point for these operands (compiled or loaded from the
        cache once per process and kind of operands), called without Numba's typing of
        the arguments at each call."""
        import numba
        from ..kernels.compile import compile_for, compiling_notice
        args = self._arguments(np.zeros(self.partition.nlocal), np.zeros(self.partition.nlocal))
        try:
            with compiling_notice(self.comm.Get_rank() == 0):
                return compile_for(self.spec.function, args)
        except numba.core.errors.TypingError as exc:   # alike on every rank: before any collective
            if self.loop_asked == "compiled" or not self.spec.interpreted_if_untyped:
                raise LoopCompileError(f"the compiled loop does not compile ({str(exc).splitlines()[0]}); "
                                       "loop='python' runs this method") from exc
            self.loop = "python"
            return self.spec.interpreted

    def with_loop(self, spec):
        """This solver with another loop on the same operands, state and buffers (a method
        that hands a solve over to another: p(l)-CG's to p-CG).  Collective only where
        compiling is."""
        other = object.__new__(type(self))
        other.__dict__.update(self.__dict__)
        other.spec = spec
        other.W = spec.workspace(self.partition.nlocal, self.M is not None)
        other.S = np.zeros(max(1, spec.scalars))
        other.entry = other._compile() if self.loop == "compiled" else spec.interpreted
        return other

    # ---------------------------------------------------------------- Python's access
    def apply(self, word, x, y):
        """``y = word x`` (operators, outermost first: "A", "M", "AM") on the solver's operands,
        from Python (a method's rare steps).  Collective for A."""
        for j, op in enumerate(reversed(word)):
            into = y if j == len(word) - 1 else np.empty_like(y)
            self._from_python(op)(x, into)
            x = into
        return y

    def _from_python(self, op):
        """The apply of "A" or "M" for Python's calls, made once per set-up (a compiled
        apply through its entry point: :func:`~pipekrylov.runtime.operators.from_python`)."""
        applies = self.__dict__.setdefault("_applies", {})
        if op not in applies:
            from ..runtime.operators import from_python
            operands = self.A_operands if op == "A" else self.P_operands
            applies[op] = from_python(op, operands, self.R, self.I, self.F)
        return applies[op]

    def reduce(self, values, label):
        """The global sums of ``values`` (one blocking reduction, traced under ``label``),
        from Python.  Collective."""
        from ..runtime.reduce import EXTRA, allreduce, reductions
        from .driver import raise_event
        R, n = self.R, len(values)
        if n + EXTRA > R.send.shape[1]:   # more values than the loop's reductions take
            R = reductions(self.comm, 1, n)
        kept = R.send[0].copy(), R.recv[0].copy()   # the loop's: the next reduction's local values
        R.send[0, :n] = values
        if "_allreduce" not in self.__dict__:   # its entry point, found once (as _from_python's)
            from ..kernels.compile import compile_for
            self._allreduce = compile_for(allreduce, (R, 0, n, 0, self.I, self.F, self.trace))
        event = self._allreduce(R, 0, n, self.spec.labels.index(label), self.I, self.F, self.trace)
        sums = R.recv[0, :n].copy()
        R.send[0], R.recv[0] = kept
        if event != L.NONE:
            raise_event(self, event)
        return sums

    @property
    def norm_inf_a(self):
        """``||A||_inf`` (collective at first use, then kept); 0 for operators that cannot tell."""
        if not hasattr(self, "_norm_inf_a"):
            self._norm_inf_a = self.A.norm_inf() if hasattr(self.A, "norm_inf") else 0.0
        return self._norm_inf_a

    def _arguments(self, x, b):
        return (self.W, x, b, self.S, self.I, self.F, self.hist, self.trace, self.A_operands, self.P_operands,
                self.R)

    # ---------------------------------------------------------------- solving
    def solve(self, b, x0=None, *, rtol=1e-5, atol=0.0, maxiter=None, callback=None, monitor=False, divtol=None):
        """Solve ``A x = b`` from ``x0`` (default 0).  Collective.

        Returns a :class:`SolveResult`: ``(x, info)`` with the details (see
        :func:`pipekrylov.cg`).  Arguments checked on each rank: an error on one is raised
        on every rank, as the original exception, at the solve's first reduction.
        ``divtol``: stop with ``diverged_dtol`` once a residual norm tested reaches
        ``divtol ||b||`` (PETSc's ``-ksp_divtol``, whose default is 1e4; None: never).
        """
        if self._ranks == 1:   # nothing to match across processes (see exclusive)
            self.failures.clear()   # what user code raised in an earlier solve (raised there, at once)
            return self._solve(b, x0, rtol, atol, maxiter, callback, monitor, divtol)
        claim = _claim(self._comm_key, self.method, self)   # exclusive(self.comm, ...), cheaper
        try:
            return self._solve(b, x0, rtol, atol, maxiter, callback, monitor, divtol)
        finally:
            _release(self._comm_key, *claim)

    def _solve(self, b, x0, rtol, atol, maxiter, callback, monitor, divtol=None):
        # (what a solve pays besides its iterations: each line here is some 0.1 us)
        t0 = time.perf_counter()
        p, many = self.partition, self._ranks > 1
        try:
            rtol, atol = _tolerance(self.method, "rtol", rtol), _tolerance(self.method, "atol", atol)
            divtol = np.inf if divtol is None else float(divtol)
            if not divtol > 0:
                raise ValueError(f"{self.method}: divtol must be positive (or None: no divergence test), "
                                 f"got {divtol!r}")
            if maxiter is None:
                maxiter = 10 * p.n
            elif int(maxiter) < 1:
                raise ValueError(f"{self.method}: maxiter must be positive, got {maxiter}")
            if many:
                self.call = SolveCall(rtol, atol, maxiter, x0, callback, monitor, b, p if self.whole else None,
                                      divtol=divtol)
            b = local_vector(b, p, "b", copy=False)
            if x0 is None:
                x = np.zeros(p.nlocal)
            elif isinstance(x0, str):
                if x0 != "Mb":
                    raise ValueError(f"{self.method}: x0 must be a vector, None or 'Mb' (x0 = M b), got {x0!r}")
                x = np.zeros(p.nlocal)
            else:
                x = local_vector(x0, p, "x0", copy=True)
            error = None
        except Exception as exc:  # noqa: BLE001 - raised on every rank at the first reduction
            if not many:
                raise
            error, b, x, maxiter, divtol = exc, np.zeros(p.nlocal), np.zeros(p.nlocal), 1, np.inf
            self.call = SolveCall(rtol, atol, maxiter, x0, callback, monitor, None)
            self.failures.append(error)
        I, F = self.I, self.F
        I[:] = self._I0
        I[L.MAXITER] = maxiter
        if callable(monitor) or bool(monitor):
            I[L.STOP_AT_TEST] = 1
        if callback is not None:
            I[L.STOP_EVERY] = 1
        F[:] = self._F0
        F[L.ATOL] = F[L.ATOL_GIVEN] = atol
        F[L.RTOL] = rtol
        F[L.DIVTOL] = divtol
        if self.failures:   # bad input, or another thread's solve on this communicator
            F[L.FLAG] = 1.0
        if many:
            F[L.AGREE] = self.call.hash(self._ranks)
        self.x0_given = x0 is not None
        if isinstance(x0, str):   # scipy's x0="Mb": start from M b (from zeros after bad input: alike on every rank)
            if self.M is not None:
                self.apply("M", b, x)
            else:
                x[:] = b
        self.spec.prepare(self)
        if self.pc_error is not None:
            return result(self, x, 0, "diverged_pc_failed", str(self.pc_error), np.empty(0), [], t0)
        return drive(self, x, b, callback, monitor, t0)

def _tolerance(method, name, value):
    """A tolerance as a float >= 0; infinite ones are accepted (scipy's: x0 is then the
    answer).  scipy's former atol=None and 'legacy' are refused as scipy >= 1.12 does."""
    if type(value) is float and value >= 0.0:
        return value
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = float("nan")
    if not number >= 0.0:
        raise ValueError(f"{method}: tolerances must be real numbers >= 0: {name}={value!r}"
                         + (" (scipy's legacy atol is gone: give atol=0.0)" if value is None or isinstance(value, str) else ""))
    return number


# ---------------------------------------------------------------- one solve per communicator at a time
_BUSY = {}   # communicator handle -> {"thread", "depth", "solver"}: the solve running on it in this process
_BUSY_LOCK = threading.Lock()


@contextlib.contextmanager
def exclusive(comm, method, solver=None):
    """Run a solve (its set-up too) as the only one on ``comm`` in this process.  Two
    threads' collectives on one communicator match each other's in any order (a wrong x,
    an MPI error, a wait forever), so the thread that comes second raises RuntimeError at
    once, and the solve already running is flagged to raise it on every rank at its next
    reduction.  (No message: the check must not be a collective of its own.)  The same
    thread may nest (a scipy-style call's set-up, then its solve).  On one rank nothing
    is matched across processes: threads may share a communicator (Parareal's threads
    share COMM_SELF)."""
    if comm.Get_size() == 1:
        yield
        return
    key = _handle(comm)
    claim = _claim(key, method, solver)
    try:
        yield
    finally:
        _release(key, *claim)


def _claim(key, method, solver):
    """:func:`exclusive`'s entry on the communicator whose handle is ``key``: ``(entry,
    the solver it held)`` for :func:`_release`.  (A Solver's solve calls the two itself:
    a generator's context costs a few microseconds a solve.)"""
    me = threading.get_ident()
    with _BUSY_LOCK:
        entry = _BUSY.get(key)
        if entry is not None and entry["thread"] != me:
            error = RuntimeError(f"{method}: another thread is solving on this communicator: MPI collectives "
                                 "of two threads on one communicator mix; give each thread its own "
                                 "communicator (comm.Dup())")
            running = entry["solver"]
            if running is not None:   # its failures and flag reach every rank at its next reduction
                running.failures.append(error)
                running.F[L.FLAG] = 1.0
            raise error
        if entry is None:
            entry = _BUSY[key] = {"thread": me, "depth": 0, "solver": None}
        entry["depth"] += 1
        outer = entry["solver"]
        if solver is not None:
            solver.failures.clear()   # what the last solve left (this one's flag is set from them)
            entry["solver"] = solver
    return entry, outer


def _release(key, entry, outer):
    with _BUSY_LOCK:
        entry["depth"] -= 1
        entry["solver"] = outer
        if entry["depth"] == 0:
            del _BUSY[key]


# ---------------------------------------------------------------- input helpers
def _operands(A, failures):
    """A's operands for a loop: a DistributedCSR's arrays (compiled), else its matvec."""
    from ..matrix.distributed import DistributedCSR
    if type(A) is DistributedCSR:
        from ..runtime.csr import operands
        return operands(A)
    return PythonOperands(lambda x, y: A.matvec(x, y), failures)


def _name(method):
    from ..loops import LoopSpec
    return method.name if isinstance(method, (LoopSpec, Refused)) else _describe_method(method)


def _solve_comm(method, A, comm):
    """:func:`~.inputs.solve_comm`, its error naming the method."""
    try:
        return solve_comm(A, comm, _world)
    except (TypeError, ValueError) as exc:   # found alike on every rank, without a message
        raise type(exc)(f"{_name(method)}: {exc}") from None


def _describe_method(method):
    return method if isinstance(method, str) else f"{type(method).__name__} {getattr(method, 'name', '')}"


class Refused:
    """A method whose options this rank refused (:func:`made`): its Solver's set-up raises
    the error on every rank, where the other ranks, which made theirs, would otherwise
    wait in a collective that this rank never reaches."""

    def __init__(self, error, name):
        self.error, self.name = error, name

    def __repr__(self):
        return f"Refused({self.name}: {self.error})"


def made(make, name):
    """``make()``, the LoopSpec of a function's method and options, or, where its options
    are wrong, a :class:`Refused` for the Solver to raise on every rank."""
    try:
        return make()
    except (TypeError, ValueError) as exc:
        return Refused(exc, name)


def solve_once(method, A, b, x0=None, *, rtol, atol, maxiter, M, callback, comm, monitor, latency, loop,
               **options):
    """One solve as the scipy-style functions make it: on a Solver set up for ``A`` and these
    arguments, kept (with A) for the next call with the same.

    A solver is reused while ``A`` is the same object with the same values: a
    DistributedCSR is immutable (a new matrix is a new object), a matrix given whole is
    compared by a CRC32 of its arrays (the check the ranks' agreement makes anyway).  On
    more than one rank the ranks agree on reusing, with one small Allreduce (they may
    not have kept the same solvers), which also checks they were called alike."""
    comm_ = _solve_comm(method, A, comm)
    with exclusive(comm_, _name(method)):
        key, same = _cache_key(method, M, comm, loop, latency, options)
        cache = _kept(A)
        fingerprint = None if distributed(A) else whole_checksum(A)
        solver = None if cache is None else cache.get(key)
        if solver is not None and solver.fingerprint != fingerprint:
            solver = None
        if comm_.Get_size() > 1 and not _agree_on(comm_, solver is not None, (same, fingerprint)):
            solver = None
        if solver is None:
            solver = Solver(A, method, M=M, comm=comm, loop=loop, latency=latency, **options)
            solver.fingerprint = fingerprint
            cache = _keep(A)
            if cache is not None:
                cache[key] = solver
                while len(cache) > KEPT:
                    cache.popitem(last=False)
        else:
            cache.move_to_end(key)
        res = solver.solve(b, x0, rtol=rtol, atol=atol, maxiter=maxiter, callback=callback, monitor=monitor)
    dtype = result_dtype(A, b)   # float32 A and b: x as scipy returns it (solved in float64)
    return res if res.x.dtype == dtype else res.replace(x=res.x.astype(dtype))


KEPT = 8   # solvers kept per matrix


def _kept(A):
    """The solvers kept with ``A``, the most recent last (None: none)."""
    return getattr(A, "_pipekrylov_solvers", None)


def _keep(A):
    """The place for ``A``'s solvers: an attribute of A, so that they go with it (a
    solver refers to its matrix: a cycle the garbage collector takes); None where A takes
    no attributes (a numpy array)."""
    cache = _kept(A)
    if cache is None:
        cache = collections.OrderedDict()
        try:
            A._pipekrylov_solvers = cache
        except AttributeError:
            return None
    return cache


def _cache_key(method, M, comm, loop, latency, options):
    """(this rank's key of the arguments, their description the ranks compare: no object
    identities, which differ from rank to rank)."""
    from ..loops import LoopSpec
    spec = method.key if isinstance(method, LoopSpec) else repr(method)
    same = (spec, M if M is None or isinstance(M, str) else type(M).__name__, loop, float(latency),
            tuple(sorted((k, repr(v)) for k, v in options.items())))
    return (same, None if M is None or isinstance(M, str) else id(M), None if comm is None else _handle(comm)), same


def _handle(comm):
    from mpi4py import MPI
    return MPI._handleof(comm)


def _agree_on(comm, hit, arguments):
    """Whether every rank holds a solver for the same arguments: one Allreduce of the hit
    flag and a hash of the arguments (with its square: equal on every rank exactly when
    ``p sum(h^2) = (sum h)^2``)."""
    from mpi4py import MPI
    h = float(zlib.crc32(repr(arguments).encode()) & 0xFFFF)
    local = np.array([float(hit), h, h * h])
    total = np.empty(3)
    comm.Allreduce(local, total, op=MPI.SUM)
    size = comm.Get_size()
    return total[0] == size and size * total[2] == total[1] * total[1]
