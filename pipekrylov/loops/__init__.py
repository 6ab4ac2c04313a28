"""The Krylov loops, each written once as a Python function that Numba compiles.

A loop runs a solve's iterations on the runtime (:mod:`pipekrylov.runtime`) until an
event (:data:`pipekrylov.runtime.layout.EVENTS`) and returns it; its driver
(:mod:`pipekrylov.solvers.driver`) handles the event in Python and calls it again where
it stopped.  All loops share one signature::

    loop(W, x, b, S, I, F, hist, trace, A, P, R) -> event

``W`` the method's workspace (a tuple of arrays), ``x`` the iterate, ``b`` the right-hand
side, ``S`` the method's scalars kept between calls, ``I`` and ``F`` the state
(:mod:`pipekrylov.runtime.layout`), ``hist`` and ``trace`` the buffers of residual norms
and reductions, ``A``, ``P``, ``R`` the operator's, the preconditioner's and the
reductions' operands.  The same function runs compiled (:func:`loop`'s dispatcher) or,
for operators only Python applies, interpreted (its ``py_func``): one program, and the
two agree bit for bit by construction.

A :class:`LoopSpec` tells the driver what it needs besides: the reductions' labels, the
workspace, the scalars, the breakdown checks.
"""
import types

from ..kernels.compile import hot

__all__ = ["loop", "LoopSpec", "Labels", "interpreted"]


def loop(function):
    """A loop function, compiled by Numba at its first call for its operands' types, as
    the runtime is (:func:`pipekrylov.kernels.compile.hot`): IEEE arithmetic, the same
    sums as interpreted; it allocates nothing (its small arrays are in its workspace)."""
    return hot(function)


def interpreted(function):
    """A loop function as the interpreter runs it: its own Python code, and so the code of
    every compiled function it calls that applies an operator (those must run for the
    operators only Python applies); what applies none (kernels, reductions) stays
    compiled.  The same source either way: one program."""
    twin, applies = _interpreted(function)
    return twin if applies else function.py_func


_INTERPRETED = {}   # compiled function -> (its interpreted twin, whether it applies operators)
_OPERATORS = {"apply_operator", "precondition"}


def _interpreted(function):
    """(the function for the interpreter, whether it applies an operator)."""
    if function in _INTERPRETED:
        return _INTERPRETED[function]
    py = function.py_func
    _INTERPRETED[function] = (function, False)   # a recursion's own calls: settled below
    rebound, applies = {}, bool(_OPERATORS & set(py.__code__.co_names))
    for name in py.__code__.co_names:
        value = py.__globals__.get(name)
        if hasattr(value, "py_func") and hasattr(value, "overloads"):   # a Numba dispatcher
            twin, its_own = _interpreted(value)
            if its_own:
                rebound[name], applies = twin, True
    if not applies:
        result = (function, False)
    else:
        scope = dict(py.__globals__, **rebound)
        twin = types.FunctionType(py.__code__, scope, py.__name__, py.__defaults__, py.__closure__)
        twin.__doc__, twin.__qualname__ = py.__doc__, py.__qualname__
        result = (twin, True)
    _INTERPRETED[function] = result
    return result


class Labels:
    """The names of a loop's reductions by the label index it traces them with: the
    names given, by their position; with ``columns`` (a deep pipeline's), index ``k >= 0``
    is column ``k`` of G and the names take the negative indices -1, -2, ...  Reductions
    the driver makes from Python add their names (:meth:`index`)."""

    def __init__(self, names, columns=False):
        self.names, self.columns = list(names), columns

    def __getitem__(self, k):
        if self.columns:
            return f"G[:,{k}]" if k >= 0 else self.names[-k - 1]
        return self.names[k]

    def index(self, name):
        if name not in self.names:
            self.names.append(name)
        k = self.names.index(name)
        return -k - 1 if self.columns else k


class LoopSpec:
    """What the driver knows of a loop.

    Parameters
    ----------
    name : str
    function : the :func:`loop` dispatcher
    labels : the reductions' names, by the label index the loop traces them with
    workspace : ``workspace(n, preconditioned) -> tuple`` of arrays
    scalars : the length of ``S``
    breakdown : ``breakdown(check, value) -> Breakdown`` for the loop's check numbers
    slots, width : reductions in flight at once, and the most values in one
    norms, reductions : residual norms an iteration may record, reductions it makes
    confirms : whether a test that passes is confirmed against ``b - A x``

    A method with more to do in Python overrides the hooks below (the derived methods'
    residual replacement and restarts: :mod:`pipekrylov.derive.solver`).
    """

    confirms = False   # whether a test that passes is confirmed against b - A x (resume at CONFIRM)
    interpreted_if_untyped = False   # loop="auto" runs it interpreted where Numba cannot type it

    def __init__(self, name, function, labels, workspace, scalars, breakdown, slots=1, width=4, norms=1,
                 reductions=1, confirms=None):
        self.name, self.function = name, function
        if confirms is not None:
            self.confirms = confirms
        self.labels = labels if isinstance(labels, Labels) else Labels(labels)
        self.workspace, self.scalars, self.breakdown = workspace, scalars, breakdown
        self.slots, self.width, self.norms, self.reductions = slots, width, norms, reductions

    @property
    def interpreted(self):
        """The loop as Python runs it (:func:`interpreted`)."""
        return interpreted(self.function)

    @property
    def key(self):
        """What tells this method and its options from another's, alike on every rank."""
        return self.name

    def fitted(self, n):
        """This loop for a system of ``n`` unknowns (GMRES's: its restart at most n)."""
        return self

    def prepare(self, solver):
        """Before each solve: the method's own fields of the state."""

    def begin(self, solver, run):
        """Before the loop's first call of a solve, with its iterate and right-hand side
        (collective where the method communicates in it)."""

    def after_test(self, solver, passed):
        """Where the loop resumes after a residual test the driver made (its monitor's), or
        None when the solve has converged; a test that passes is confirmed against
        ``b - A x`` first where the method :attr:`confirms`."""
        from ..runtime.layout import AFTER_TEST, CONFIRM
        if not passed:
            return AFTER_TEST
        return CONFIRM if self.confirms else None

    def iterated(self, solver, run):
        """At an ITERATED event, before the callback."""

    def broke_down(self, solver, run, breakdown):
        """At a breakdown: True to go on (the method has set where to resume), else the
        breakdown is the solve's end (or raise another, or
        :class:`~pipekrylov.solvers.driver.Finished`)."""
        return False

    def event(self, solver, run, event):
        """A method's own event.  RESTART, where the method :attr:`confirms`: ``b - A x``
        did not confirm the test the driver reported; its norm replaces the history's
        last, and the loop starts again from x."""
        from ..runtime import layout as L
        if event == L.RESTART and self.confirms:
            run.replace_last(float(solver.F[L.VALUE]))
            solver.I[L.RESUME] = L.FROM_X
            return
        raise RuntimeError(f"{self.name}: unexpected event {event} from the loop")

    def report(self, solver):
        """What the method reports in its result besides the common attributes."""
        return {}
