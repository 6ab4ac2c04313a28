"""Polynomials in scalar symbols: the coefficients of the derivation's linear combinations.

A vector quantity of one iteration is a sum ``sum_k c_k * v_k`` whose coefficients are
polynomials in the iteration's scalars (``alpha``, ``beta*omega``, ...); dot products of
two such sums expand, by bilinearity, into sums over pairs with products of coefficients.
Exact rational arithmetic (Fraction) keeps the expansion free of rounding.
"""
from fractions import Fraction

__all__ = ["Poly"]


class Poly:
    """A polynomial in scalar symbols: {monomial: coefficient}; a monomial is a sorted
    tuple of symbol names (repeated for powers)."""

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
        """[(sign, factors)] for printing, e.g. ('-', '2*alpha*beta'); '' stands for 1."""
        out = []
        for m, c in sorted(self.terms.items(), key=lambda mc: (len(mc[0]), mc[0])):
            sign = "-" if c < 0 else "+"
            c = abs(c)
            factors = ([] if c == 1 else [_number(c)]) + list(m)
            out.append((sign, "*".join(factors)))
        return out

    def __str__(self):
        text = " ".join(f"{s} {f or '1'}" for s, f in self.monomials()) or "0"
        return text[2:] if text.startswith("+ ") else text


def _number(c):
    return str(c.numerator) if c.denominator == 1 else repr(float(c))
