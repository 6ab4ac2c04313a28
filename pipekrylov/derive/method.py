"""The small symbolic form in which a Krylov method is written once.

A method is a list of start-up statements and a list of statements for one iteration,
each one line that reads like the textbook::

    u = M r                 operator application (A, M, or a word: "v = A M p")
    gamma = (r, u)          dot product
    beta = gamma / gamma_old    scalar expression (Python syntax)
    p = u + beta*p          vector recurrence: a sum of [scalar*]...vector terms
    p = 0                   zero vector (start-up)

Vectors are the ``state`` (carried from one iteration to the next), the ``constants``
(``b``, and e.g. BiCGStab's shadow residual ``r0``) and temporaries.  A temporary used
before it is assigned in an iteration means its value from the previous iteration (as in
BiCGStab's ``p = r + beta*(p - omega*v)``).  ``checks`` name the breakdowns:
``("delta > 0", "diverged_indefinite_mat")`` stops the solver with that reason when the
condition fails.
"""
import ast
import math
import operator
import re
from dataclasses import dataclass, field

from .algebra import Poly

__all__ = ["Method", "Statement", "evaluate", "parse_statement"]

OPERATORS = ("A", "M")
_NAME = re.compile(r"^[A-Za-z_]\w*$")
_NUMBER = re.compile(r"^\d+(\.\d*)?$")


_FUNCTIONS = {"float": float, "int": int, "abs": abs, "min": min, "max": max, "sqrt": math.sqrt}
_ARITHMETIC = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
               ast.Div: operator.truediv, ast.Pow: operator.pow, ast.USub: operator.neg,
               ast.UAdd: operator.pos, ast.Not: operator.not_, ast.Lt: operator.lt,
               ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge,
               ast.Eq: operator.eq, ast.NotEq: operator.ne}


def evaluate(expression, scalars):
    """The value of a scalar expression (arithmetic, comparisons, ``and``/``or`` and the
    functions float, int, abs, min, max, sqrt) over the named ``scalars``.

    Walked node by node, not eval'd: a method's text is data, and no text a user hands
    the package is run as Python.  An unknown name raises NameError."""
    def value(node):
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float, str)):
            return node.value
        if isinstance(node, ast.Name):
            if node.id not in scalars:
                raise NameError(node.id)
            return scalars[node.id]
        if isinstance(node, ast.BinOp) and type(node.op) in _ARITHMETIC:
            return _ARITHMETIC[type(node.op)](value(node.left), value(node.right))
        if isinstance(node, ast.UnaryOp) and type(node.op) in _ARITHMETIC:
            return _ARITHMETIC[type(node.op)](value(node.operand))
        if isinstance(node, ast.Compare):
            left, result = value(node.left), True
            for op, right in zip(node.ops, map(value, node.comparators)):
                result, left = result and _ARITHMETIC[type(op)](left, right), right
            return result
        if isinstance(node, ast.BoolOp):
            values = [value(v) for v in node.values]
            return all(values) if isinstance(node.op, ast.And) else any(values)
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FUNCTIONS
                and not node.keywords):
            return _FUNCTIONS[node.func.id](*map(value, node.args))
        raise ValueError(f"{expression!r}: {ast.unparse(node)!r} is not arithmetic on scalars")
    return value(ast.parse(expression, mode="eval").body)


@dataclass(frozen=True)
class Statement:
    """One parsed line.  kind: 'apply', 'lincomb', 'dot', 'scalar' or 'zero'."""

    kind: str
    target: str
    text: str
    word: str = ""             # apply: operators, outermost first
    source: str = ""           # apply: the vector operated on
    terms: tuple = ()          # lincomb: ((Poly, vector), ...)
    pair: tuple = ()           # dot: (u, v)
    expression: str = ""       # scalar: Python expression

    def vectors_read(self):
        if self.kind == "apply":
            return [self.source]
        if self.kind == "lincomb":
            return [v for _, v in self.terms]
        if self.kind == "dot":
            return list(self.pair)
        return []

    def scalars_read(self):
        if self.kind == "lincomb":
            return sorted({s for c, _ in self.terms for s in c.symbols()})
        if self.kind == "scalar":
            return sorted({n.id for n in ast.walk(ast.parse(self.expression, mode="eval"))
                           if isinstance(n, ast.Name)})
        return []


def parse_statement(text, vectors):
    """Parse one line; ``vectors`` is the set of names known to be vectors so far."""
    target, eq, rhs = (s.strip() for s in text.partition("="))
    if not eq or not _NAME.match(target) or not rhs:
        raise ValueError(f"cannot parse {text!r}: expected 'name = ...'")
    words = rhs.split()
    if rhs == "0":
        return Statement("zero", target, text)
    if len(words) >= 2 and all(w in OPERATORS for w in words[:-1]) and _NAME.match(words[-1]):
        if words[-1] not in vectors:
            raise ValueError(f"{text!r}: {words[-1]!r} is not a vector")
        return Statement("apply", target, text, word="".join(words[:-1]), source=words[-1])
    dot = re.fullmatch(r"\(\s*(\w+)\s*,\s*(\w+)\s*\)", rhs)
    if dot:
        for v in dot.groups():
            if v not in vectors:
                raise ValueError(f"{text!r}: {v!r} is not a vector")
        return Statement("dot", target, text, pair=dot.groups())
    names = {n.id for n in ast.walk(_parse_expr(rhs, text)) if isinstance(n, ast.Name)}
    if names & set(vectors):
        return Statement("lincomb", target, text, terms=_parse_lincomb(rhs, vectors, text))
    return Statement("scalar", target, text, expression=rhs)


def _parse_expr(rhs, text):
    try:
        return ast.parse(rhs, mode="eval")
    except SyntaxError:
        raise ValueError(f"cannot parse {text!r}") from None


def _parse_lincomb(rhs, vectors, text):
    """'r + beta*p - beta*omega*v' -> ((Poly(1), 'r'), (Poly(beta), 'p'), (Poly(-beta*omega), 'v'))."""
    expanded = _expand(ast.parse(rhs, mode="eval").body, vectors, text)
    terms = {}
    for vector, coef in expanded:
        terms[vector] = terms[vector] + coef if vector in terms else coef
    return tuple((c, v) for v, c in terms.items() if c)


def _expand(node, vectors, text):
    """[(vector, Poly)] for a linear expression in the vectors."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)):
        right = _expand(node.right, vectors, text)
        if isinstance(node.op, ast.Sub):
            right = [(v, -c) for v, c in right]
        return _expand(node.left, vectors, text) + right
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return [(v, -c) for v, c in _expand(node.operand, vectors, text)]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
        left, right = node.left, node.right
        if _has_vector(left, vectors) and _has_vector(right, vectors):
            raise ValueError(f"{text!r}: product of two vectors")
        if _has_vector(left, vectors):
            left, right = right, left
        coef = _scalar_poly(left, text)
        return [(v, coef * c) for v, c in _expand(right, vectors, text)]
    if isinstance(node, ast.Name) and node.id in vectors:
        return [(node.id, Poly.const(1))]
    raise ValueError(f"{text!r}: not a linear combination of vectors ({ast.unparse(node)})")


def _has_vector(node, vectors):
    return any(isinstance(n, ast.Name) and n.id in vectors for n in ast.walk(node))


def _scalar_poly(node, text):
    if isinstance(node, ast.Name):
        return Poly.symbol(node.id)
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        return Poly.const(node.value)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
        return _scalar_poly(node.left, text) * _scalar_poly(node.right, text)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_scalar_poly(node.operand, text)
    raise ValueError(f"{text!r}: vector coefficients must be products of scalars and numbers "
                     f"({ast.unparse(node)}); give the scalar a name first")


@dataclass(frozen=True)
class Method:
    """A Krylov method written once; see the module docstring for the statement forms.

    Parameters
    ----------
    name, title : str
    state : tuple of str
        Vectors carried from one iteration to the next (the solution among them).
    startup, iteration : tuple of str
        Statements.
    residual : str
        The vector whose norm is tested for convergence at the top of each iteration.
    norm : '2' or 'natural'
        The norm tested: ``||r||_2``, or preconditioned CG's natural ``sqrt((r, M r))``
        (the norm p(l)-CG tests, so that a continuation in p-CG tests the same).
    solution : str
    constants : tuple of str
        Vectors fixed during the iterations (``b``; a shadow residual ``r0``).
    checks : tuple of (condition, reason) or (condition, reason, finish)
        Breakdown tests on scalars, made as soon as their scalars are known.  ``finish``,
        an update of the solution (``"x = x + alpha*phat"``), marks a breakdown that can be
        a lucky one: the method is done (BiCGStab's ``(t, t) = 0`` when ``s = 0``).  The
        solver applies it, then checks ``b - A x`` before it reports convergence.
    invariants : tuple of str
        Operator statements that hold between state vectors in exact arithmetic
        (``"s = A p"`` when ``s`` is kept by a recurrence); residual replacement restores
        them after ``r = b - A x``.
    reduction_points : tuple of str
        Iteration statements before which a reduction starts, besides the top of the
        iteration; each segment's operator applications then overlap its own reduction.
        Empty (default): the derivation finds the fewest points that work.  Given, it
        derives that schedule or none (Gropp's CG: ``("q = M s",)``).
    """

    name: str
    title: str
    state: tuple
    startup: tuple
    iteration: tuple
    residual: str = "r"
    norm: str = "2"
    solution: str = "x"
    constants: tuple = ("b",)
    checks: tuple = ()
    invariants: tuple = ()
    reduction_points: tuple = ()
    parsed_startup: tuple = field(init=False, repr=False, compare=False)
    parsed_iteration: tuple = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        vectors = set(self.state) | set(self.constants)
        for stmt in self.startup + self.iteration:  # first pass: which names are vectors
            target, _, rhs = (s.strip() for s in stmt.partition("="))
            if rhs == "0" or (rhs.split() and rhs.split()[0] in OPERATORS):
                vectors.add(target)
        changed = True
        while changed:  # linear combinations of vectors are vectors too
            changed = False
            for stmt in self.startup + self.iteration:
                target, _, rhs = (s.strip() for s in stmt.partition("="))
                if target not in vectors and not rhs.startswith("(") and \
                        any(re.search(rf"\b{v}\b", rhs) for v in vectors):
                    vectors.add(target)
                    changed = True
        object.__setattr__(self, "parsed_startup", tuple(parse_statement(s, vectors) for s in self.startup))
        object.__setattr__(self, "parsed_iteration", tuple(parse_statement(s, vectors) for s in self.iteration))
        object.__setattr__(self, "vectors", frozenset(vectors))
        parsed = tuple(parse_statement(s, vectors) for s in self.invariants)
        if any(p.kind != "apply" or p.target not in self.state for p in parsed):
            raise ValueError(f"{self.name}: invariants must read 'state = A state' or 'state = M state'")
        object.__setattr__(self, "parsed_invariants", parsed)
        texts = [" ".join(stmt.text.split()) for stmt in self.parsed_iteration]
        points = [" ".join(p.split()) for p in self.reduction_points]
        for point, given in zip(points, self.reduction_points):
            if point not in texts[1:]:
                raise ValueError(f"{self.name}: reduction point {given!r} is not a statement of the iteration "
                                 "after its first")
        object.__setattr__(self, "cuts", tuple(sorted({texts.index(p) for p in points})))
        if self.norm not in ("2", "natural"):
            raise ValueError(f"{self.name}: norm must be '2' or 'natural', got {self.norm!r}")
        finishes = {}
        for check in self.checks:
            if len(check) == 3:
                finish = parse_statement(check[2], vectors)
                if finish.kind != "lincomb" or finish.target != self.solution:
                    raise ValueError(f"{self.name}: check {check[0]!r}: its finish must update the "
                                     f"solution, '{self.solution} = {self.solution} + ...', got {check[2]!r}")
                finishes[check[0]] = finish
        object.__setattr__(self, "finishes", finishes)
        for name in (self.residual, self.solution, *self.state):
            if name not in vectors:
                raise ValueError(f"{self.name}: {name!r} is not a vector of the method")
        self._check_names_defined()
        for stmt in self.parsed_iteration:
            if stmt.kind == "zero":
                raise ValueError(f"{self.name}: '{stmt.text}': zero vectors belong in the start-up")
            if stmt.kind == "apply" and stmt.target in self.state:
                raise ValueError(f"{self.name}: '{stmt.text}': an operator image cannot be a state vector; "
                                 "name it as a temporary")

    def _check_names_defined(self):
        """Every name a statement reads is defined: a constant, the solution, or set by a
        start-up statement before it; in the iteration also by an earlier statement of
        the iteration, or, for a vector, by a later one (the previous pass's value, zero
        in the first).  A scalar the iteration reads before it sets it needs a start-up
        value."""
        import builtins
        known = set(self.constants) | {self.solution} | set(dir(builtins))
        carried = {st.target for st in self.parsed_iteration} & self.vectors

        def check(stmt, known, where):
            for name in stmt.vectors_read() + stmt.scalars_read():
                if name not in known:
                    later = name in {st.target for st in self.parsed_startup + self.parsed_iteration}
                    raise ValueError(f"{self.name}: '{stmt.text}' ({where}) reads {name!r}, which "
                                     + ("is set only later: give it a start-up value" if later
                                        else "no statement defines"))
        for stmt in self.parsed_startup:
            check(stmt, known, "start-up")
            known.add(stmt.target)
        known |= carried
        for stmt in self.parsed_iteration:
            check(stmt, known, "iteration")
            known.add(stmt.target)
        for condition, *_ in self.checks:
            names = {n.id for n in ast.walk(ast.parse(condition, mode="eval")) if isinstance(n, ast.Name)}
            for name in sorted(names - known):
                raise ValueError(f"{self.name}: the check {condition!r} reads {name!r}, which no statement defines")

    def __str__(self):
        lines = [f"{self.title}", "start-up:"]
        lines += [f"    {s}" for s in self.startup]
        lines += ["iteration:"] + [f"    {s}" for s in self.iteration]
        return "\n".join(lines)
