"""The statement executor: a method description's statements run on numpy vectors.

The reference interpreter (:mod:`.interpret`) runs a whole base method with it on one
process; the Python loop (:mod:`.pyloop`) runs the start-up with it on the solve's
distributed operators and reductions.  (The symbolic pass, :mod:`.versions`, and the
compiled start-up, :mod:`.loopgen`, read the same statements to build forms and source
text, not values.)
"""
import numpy as np

from .method import evaluate

__all__ = ["Executor", "coefficient"]


def coefficient(poly, scalars):
    """The value of a recurrence coefficient (a polynomial in the scalars)."""
    total = 0.0
    for monomial, c in poly.terms.items():
        term = float(c)
        for s in monomial:
            term *= scalars[s]
        total += term
    return total


class Executor:
    """Runs statements on ``vectors`` ({name: array}, updated in place where an array
    exists) and ``scalars`` ({name: value}).

    ``operator(op, v)`` returns a new array, the operator ``op`` ('A' or 'M') applied to
    ``v``; ``reduce(value, name)`` the global value of a local dot product (on one process,
    the value itself).
    """

    def __init__(self, n, operator, reduce=lambda value, name: float(value), vectors=None, scalars=None):
        self.n = n
        self.operator = operator
        self.reduce = reduce
        self.vectors = {} if vectors is None else vectors
        self.scalars = {} if scalars is None else scalars

    def __call__(self, statements):
        for st in statements:
            getattr(self, st.kind)(st)

    def image(self, word, value):
        """``word`` (operators, outermost first) applied to ``value``."""
        for op in reversed(word):
            value = self.operator(op, value)
        return value

    def apply(self, st):
        self.vectors[st.target] = self.image(st.word, self.vectors[st.source])

    def zero(self, st):
        self._store(st.target, 0.0)

    def lincomb(self, st):
        self._store(st.target, sum(coefficient(c, self.scalars) * self.vectors[v] for c, v in st.terms))

    def dot(self, st):
        u, v = (self.vectors[name] for name in st.pair)
        self.scalars[st.target] = self.reduce(u @ v, st.target)

    def scalar(self, st):
        self.scalars[st.target] = evaluate(st.expression, self.scalars)

    def _store(self, name, value):
        self.vectors.setdefault(name, np.zeros(self.n))[:] = value
