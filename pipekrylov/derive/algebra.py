"""Linear combinations of vectors with polynomial coefficients in scalar symbols.

The derivation works on vector quantities of one iteration written as
``sum_k c_k * v_k``, where each ``v_k`` is an :class:`Image` (a state vector at the start
of the iteration, under a word of operators) and each ``c_k`` a :class:`Poly`, a
polynomial in the iteration's scalars (``alpha``, ``beta``, ...).  Dot products of two
such combinations expand, by bilinearity, into sums over pairs of images.
"""
from collections import namedtuple
from fractions import Fraction

__all__ = ["Image", "Poly", "LinComb", "bilinear"]


class Image(namedtuple("Image", "base word at", defaults=(0,))):
    """``word`` applied to the value of vector ``base`` at reduction point ``at``.

    ``word`` reads like the math, outermost operator first: ``Image("r", "AM")`` is
    ``A M r``.  The empty word is the vector itself.  ``at`` numbers the reduction points
    of an iteration (0: its start).  The storage name ignores ``at``.
    """

    def apply(self, op):
        return Image(self.base, op + self.word, self.at)

    @property
    def parent(self):
        """The image one operator shorter (what a direct application starts from)."""
        return Image(self.base, self.word[1:], self.at)

    @property
    def name(self):
        return f"{self.word}{self.base}"

    def __str__(self):
        return " ".join(self.word + self.base) if self.word else self.base


class Poly:
    """A polynomial in scalar symbols: {monomial: coefficient}; a monomial is a sorted
    tuple of symbol names (repeats for powers)."""

    __slots__ = ("terms",)

    def __init__(self, terms=None):
        self.terms = {m: c for m, c in (terms or {}).items() if c != 0}

    @classmethod
    def const(cls, value):
        return cls({(): Fraction(value)})

    @classmethod
    def symbol(cls, name):
        return cls({(name,): Fraction(1)})

    def __add__(self, other):
        out = dict(self.terms)
        for m, c in other.terms.items():
            out[m] = out.get(m, 0) + c
        return Poly(out)

    def __neg__(self):
        return Poly({m: -c for m, c in self.terms.items()})

    def __sub__(self, other):
        return self + (-other)

    def __mul__(self, other):
        out = {}
        for m1, c1 in self.terms.items():
            for m2, c2 in other.terms.items():
                m = tuple(sorted(m1 + m2))
                out[m] = out.get(m, 0) + c1 * c2
        return Poly(out)

    def __bool__(self):
        return bool(self.terms)

    def __eq__(self, other):
        return isinstance(other, Poly) and self.terms == other.terms

    def __hash__(self):
        return hash(frozenset(self.terms.items()))

    def symbols(self):
        return {s for m in self.terms for s in m}

    def monomials(self):
        """[(sign, factor string)] for printing: ('-', '2*alpha*beta')."""
        out = []
        for m, c in sorted(self.terms.items(), key=lambda mc: (len(mc[0]), mc[0])):
            sign = "-" if c < 0 else "+"
            c = abs(c)
            factors = ([] if c == 1 else [_number(c)]) + list(m)
            out.append((sign, "*".join(factors)))  # '' for a plain +-1
        return out

    def __str__(self):
        text = " ".join(f"{s} {f or '1'}" for s, f in self.monomials()) or "0"
        return text[2:] if text.startswith("+ ") else text


def _number(c):
    return str(c.numerator) if c.denominator == 1 else repr(float(c))


class LinComb:
    """sum of Poly * Image."""

    __slots__ = ("terms",)

    def __init__(self, terms=None):
        self.terms = {v: c for v, c in (terms or {}).items() if c}

    @classmethod
    def of(cls, image):
        return cls({image: Poly.const(1)})

    def __add__(self, other):
        out = dict(self.terms)
        for v, c in other.terms.items():
            out[v] = out[v] + c if v in out else c
        return LinComb(out)

    def __neg__(self):
        return LinComb({v: -c for v, c in self.terms.items()})

    def __sub__(self, other):
        return self + (-other)

    def scale(self, poly):
        return LinComb({v: c * poly for v, c in self.terms.items()})

    def apply(self, op):
        return LinComb({v.apply(op): c for v, c in self.terms.items()})

    def images(self):
        return set(self.terms)

    def __str__(self):
        parts = []
        for v, c in sorted(self.terms.items(), key=lambda vc: (len(vc[0].word), vc[0])):
            for sign, factor in c.monomials():
                parts.append(f"{sign} {factor + '*' if factor else ''}{v.name}")
        text = " ".join(parts) or "0"
        return text[2:] if text.startswith("+ ") else text


def bilinear(a, b):
    """(a, b) for symmetric real dots: {frozenset-ordered pair of images: Poly}."""
    out = {}
    for u, cu in a.terms.items():
        for v, cv in b.terms.items():
            pair = tuple(sorted((u, v)))
            out[pair] = out[pair] + cu * cv if pair in out else cu * cv
    return {p: c for p, c in out.items() if c}
