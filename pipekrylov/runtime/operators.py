"""``apply_operator`` and ``precondition``: the two operations a Krylov loop applies,
generic over the kinds of operand.

A matrix format or a preconditioner brings its own parts: a namedtuple class for its
arrays (the *operands* a loop receives) and an apply for them, registered here with
:func:`register`.  A loop compiled by Numba calls the compiled apply of its operands'
class (Numba picks it when it types the loop, so a new kind costs no branch in any
loop); the same loop run by the interpreter (operators only Python can apply: a
LinearOperator, a callable M, PETSc's PCApply) calls its Python apply.  Both count and
time each application in the loop's state.

The apply's signature: ``apply(operands, x, y, R, slot, I, F)``: ``y = op x``, poking the
reduction in ``slot`` of ``R`` now and then while it works (none for a negative slot);
``I`` and ``F`` are the loop's state (an MPI error, a failure to flag).
"""
import inspect
import time

import numpy as np

from numba.extending import overload

from ..kernels.compile import NO_REFCOUNT, REGISTERED, compile_for

from .layout import PC_TIME, PCS, SPMV_TIME, SPMVS
from .reduce import MPI_Wtime

__all__ = ["register", "compiled", "apply_operator", "precondition", "from_python"]

_COMPILED = {}   # operands class -> compiled apply
_PYTHON = {}     # operands class -> apply called from Python


def register(operands_class, apply, python=None):
    """Register the apply of an operand kind: ``apply`` compiled by Numba (None: only the
    interpreter can apply it), ``python`` its apply from Python (default: ``apply``,
    called through Numba's dispatcher)."""
    if apply is not None:
        _COMPILED[operands_class] = apply
        # a loop compiled with it depends on its module (the loop does not import it)
        REGISTERED.setdefault(__file__, set()).add(inspect.getfile(apply.py_func))
    _PYTHON[operands_class] = python or apply
    return operands_class


def compiled(operands):
    """Whether a loop can be compiled for these operands."""
    return type(operands) in _COMPILED


def apply_operator(A, x, y, R, slot, I, F):
    """y = A x, timed and counted."""
    _timed(_PYTHON[type(A)], A, x, y, R, slot, I, F, SPMV_TIME, SPMVS)


def precondition(P, r, z, R, slot, I, F):
    """z = M^{-1} r, timed and counted."""
    _timed(_PYTHON[type(P)], P, r, z, R, slot, I, F, PC_TIME, PCS)


def _timed(apply, operands, x, y, R, slot, I, F, seconds, count):
    t0 = time.perf_counter()
    apply(operands, x, y, R, slot, I, F)
    F[seconds] += time.perf_counter() - t0
    I[count] += 1


def from_python(kind, operands, R, I, F):
    """``apply(x, y)``: ``y = op x`` on ``operands`` (kind "A" the operator, "M" the
    preconditioner) with the state ``R, I, F``, for Python's calls (a method's rare
    steps), timed and counted as in a loop.  A compiled apply is called through its entry
    point for these arguments' types, found here once: Numba's dispatcher would type the
    operands' tuple of arrays at every call (0.2 ms for a CSR matrix's, numba 0.60)."""
    python = apply_operator if kind == "A" else precondition
    compiled_apply = _COMPILED.get(type(operands))
    if compiled_apply is None:
        return lambda x, y: python(operands, x, y, R, -1, I, F)
    vector = np.zeros(1)
    entry = compile_for(compiled_apply, (operands, vector, vector, R, -1, I, F))
    seconds, count = (SPMV_TIME, SPMVS) if kind == "A" else (PC_TIME, PCS)

    def apply(x, y):
        if _plain(x) and _plain(y):
            _timed(entry, operands, x, y, R, -1, I, F, seconds, count)
        else:   # the dispatcher converts (or refuses) it
            python(operands, x, y, R, -1, I, F)
    return apply


def _plain(v):
    """A vector a compiled entry point takes as it is: a contiguous 1-D float64 array.
    (solvers.inputs.local_vector asks the same, and writable, without importing Numba.)"""
    return type(v) is np.ndarray and v.dtype == np.float64 and v.ndim == 1 and v.flags.c_contiguous


@overload(apply_operator, jit_options={"nogil": True, "cache": True, "error_model": "numpy", **NO_REFCOUNT}, inline="always")
def _apply_operator(A, x, y, R, slot, I, F):
    apply = _COMPILED[A.instance_class]

    def impl(A, x, y, R, slot, I, F):
        t0 = MPI_Wtime()
        apply(A, x, y, R, slot, I, F)
        F[SPMV_TIME] += MPI_Wtime() - t0
        I[SPMVS] += 1
    return impl


@overload(precondition, jit_options={"nogil": True, "cache": True, "error_model": "numpy", **NO_REFCOUNT}, inline="always")
def _precondition(P, r, z, R, slot, I, F):
    apply = _COMPILED[P.instance_class]

    def impl(P, r, z, R, slot, I, F):
        t0 = MPI_Wtime()
        apply(P, r, z, R, slot, I, F)
        F[PC_TIME] += MPI_Wtime() - t0
        I[PCS] += 1
    return impl
