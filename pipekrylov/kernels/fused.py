"""Fused vector kernels generated from a few lines of update statements.

One pass over memory performs several updates and the local parts of several dot
products, where separate AXPYs and dots would each stream the vectors again::

    kernel = fused_kernel(["x = x + alpha*p", "r = r - alpha*q"], dots=["r.r"],
                          scalars=["alpha"])
    (rr,) = kernel(vectors, {"alpha": 0.5})     # vectors: dict name -> ndarray

Statements run in order for each index ``i`` and see the new values of vectors updated
before them; the dots use the values after all statements.  (The derived pipelined
methods emit their own kernels: pipekrylov.derive.codegen.)  A term is a product of
factors, each a number, a scalar name or a vector name: ``z = dinv*r``,
``w = w - 2*beta*s``.  ``print(kernel.source)`` shows the generated loop.
"""
import re
import threading

import numpy as np

from .compile import compile_source, jit
from .lanes import lane_sums, lanes_total

__all__ = ["fused_kernel", "FusedKernel", "dot"]

_TERM = re.compile(r"([+-]?)\s*([^+-]+)")
_NAME = re.compile(r"^[A-Za-z_]\w*$")
_NUMBER = re.compile(r"^\d+(\.\d*)?([eE][+-]?\d+)?$")
_KERNELS = {}
_KERNELS_LOCK = threading.Lock()


class FusedKernel:
    """A compiled fused loop; call it with ``(vectors, scalars)``, get the local dots."""

    def __init__(self, statements, dots, scalars, exact=False, noalias=False):
        self.statements = tuple(statements)
        self.dots = tuple(dots)
        self.scalars = tuple(scalars)
        self.targets, self.reads, parsed = _parse(self.statements, self.scalars)
        self.vectors = tuple(dict.fromkeys(self.reads + self.targets +
                                           tuple(v for d in self.dots for v in d.split("."))))
        self.source = _emit(parsed, self.dots, self.vectors, self.scalars)
        nvec = len(self.vectors)
        signature = "void(" + ", ".join(["float64[::1]"] * nvec + ["float64[::1]", "float64[::1]"]) + ")"
        # exact: IEEE arithmetic, no fused multiply-adds (the results numpy's expressions give)
        self._compiled = compile_source(self.source, "fused", [signature], refcount=False, noalias=noalias,
                                        **({"fastmath": False} if exact else {}))

    def __call__(self, vectors, scalars=None):
        # fresh small arrays per call: one kernel object serves every thread at once
        coef = np.array([scalars[name] for name in self.scalars] or [0.0])
        out = np.zeros(max(1, len(self.dots)))
        self._compiled(*[vectors[v] for v in self.vectors], coef, out)
        return out[:len(self.dots)]

    @property
    def function(self):
        """The compiled kernel itself: ``function(*vectors, coef, out)``, its vectors by
        position (in :attr:`vectors`' order) or by name; what a loop calls."""
        return self._compiled

    @property
    def module(self):
        """The name of the generated module that defines the kernel as ``fused`` (what a
        compiled loop imports it from)."""
        return self._compiled.py_func.__module__

    def __repr__(self):
        return f"FusedKernel({list(self.statements)!r}, dots={list(self.dots)!r})"


def fused_kernel(statements, dots=(), scalars=(), exact=False, noalias=False):
    """The (cached) :class:`FusedKernel` for these statements and dots; ``exact``: without
    the fast-math contractions (each operation rounded as numpy rounds it); ``noalias``:
    its callers never pass overlapping arrays (see
    :data:`pipekrylov.kernels.compile.NOALIAS`: LLVM then vectorizes a loop that stores to
    several vectors, which it otherwise runs scalar)."""
    key = (tuple(statements), tuple(dots), tuple(scalars), bool(exact), bool(noalias))
    with _KERNELS_LOCK:
        if key not in _KERNELS:
            _KERNELS[key] = FusedKernel(*key)
        return _KERNELS[key]


@jit(["float64(float64[::1], float64[::1])"], fastmath=False, refcount=False)
def dot(a, b):
    """The local dot product in eight interleaved sums, added in a fixed order: IEEE
    arithmetic, so its bits do not depend on where the code is compiled or inlined (a
    reassociated sum is vectorized, and rounded, as each caller's compilation decides;
    BLAS's order depends on the CPU).  The eight sums are one vector register's lanes
    (:mod:`pipekrylov.kernels.lanes`)."""
    n = b.shape[0]
    s0, s1, s2, s3, s4, s5, s6, s7 = lane_sums(a, b)
    for j in range(n - n % 8, n):
        s0 += a[j] * b[j]
    return lanes_total(s0, s1, s2, s3, s4, s5, s6, s7)


def _parse(statements, scalars):
    targets, reads, parsed = [], [], []
    for statement in statements:
        target, _, expression = (s.strip() for s in statement.partition("="))
        if not _NAME.match(target) or not expression:
            raise ValueError(f"cannot parse fused statement {statement!r}")
        terms = []
        for sign, term in _TERM.findall(expression.replace(" ", "")):
            factors = term.split("*")
            for f in factors:
                if not (_NAME.match(f) or _NUMBER.match(f)):
                    raise ValueError(f"bad factor {f!r} in {statement!r}")
                if _NAME.match(f) and f not in scalars and f not in targets and f not in reads:
                    reads.append(f)
            terms.append((sign or "+", factors))
        if target not in targets:
            targets.append(target)
        parsed.append((target, terms))
    return tuple(targets), tuple(reads), parsed


def _emit(parsed, dots, vectors, scalars):
    local = {v: f"{v}_i" for v in vectors}
    coef = {s: f"c{k}" for k, s in enumerate(scalars)}

    def factor(f):
        return coef.get(f) or local.get(f) or repr(float(f))

    lines = [f"def fused({', '.join(vectors)}, coef, out):"]
    lines += [f"    {c} = coef[{k}]" for k, c in enumerate(coef.values())]
    lines += [f"    d{k} = 0.0" for k in range(len(dots))]
    lines.append(f"    for i in range({vectors[0]}.shape[0]):")
    loaded = set()
    for target, terms in parsed:
        for _, factors in terms:
            for f in factors:
                if f in local and f not in loaded:
                    lines.append(f"        {local[f]} = {f}[i]")
                    loaded.add(f)
        rhs = " ".join(f"{sign} {'*'.join(factor(f) for f in factors)}" for sign, factors in terms)
        rhs = rhs[2:] if rhs.startswith("+ ") else rhs
        lines.append(f"        {local[target]} = {rhs}")
        lines.append(f"        {target}[i] = {local[target]}")
        loaded.add(target)
    for k, dot in enumerate(dots):
        a, b = dot.split(".")
        for v in (a, b):
            if v not in loaded:
                lines.append(f"        {local[v]} = {v}[i]")
                loaded.add(v)
        lines.append(f"        d{k} += {local[a]} * {local[b]}")
    lines += [f"    out[{k}] = d{k}" for k in range(len(dots))]
    return "\n".join(lines) + "\n"

