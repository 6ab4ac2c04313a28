"""Pass 0: the symbolic iteration.  Every assignment of a vector makes a new *version*;
an operator application makes an *image* ``W v`` of a version; every dot is lifted, by
bilinearity, to dots of images of the versions current at its segment's reduction point.
"""
import ast

from .algebra import Poly
from .forms import Img, ScalarStep, SymbolicIteration, Version

__all__ = ["symbolic_iteration", "lift", "carried_temporaries"]


def symbolic_iteration(method, boundaries=()):
    """Versions, images and bilinear dots of one iteration, cut before ``boundaries``."""
    stmts = method.parsed_iteration
    cuts = [0, *boundaries, len(stmts)]
    versions = []

    def new(name, segment, kind, **kw):
        v = Version(name, len(versions), segment, kind, **kw)
        versions.append(v)
        return v

    env = {s: new(s, -1, "start") for s in method.state}
    env.update({c: new(c, -1, "const") for c in method.constants})
    start = {s: env[s] for s in method.state}
    for temp, (word, state) in carried_temporaries(method).items():
        env[temp] = new(temp, -1, "apply", word=word, arg=env[state])
    startup_scalars = {s.target for s in method.parsed_startup if s.kind in ("scalar", "dot")}
    ssa, counts, seen = {}, {}, set()

    def rename(name):
        seen.add(name)
        return ssa.get(name, name)

    def assign(name):
        if name in seen or name in startup_scalars or name in ssa:
            counts[name] = counts.get(name, 0) + 1
            ssa[name] = f"{name}_{counts[name]}"
        else:
            ssa[name] = name
        seen.add(name)
        return ssa[name]

    current, segments, budget = [], [], []
    for k, (a, b) in enumerate(zip(cuts, cuts[1:])):
        current.append(dict(env))
        here = dict(env)
        steps, ops = [], {}
        for st in stmts[a:b]:
            if st.kind == "apply":
                env[st.target] = new(st.target, k, "apply", word=st.word, arg=env[st.source], source=st.text)
                for op in st.word:
                    ops[op] = ops.get(op, 0) + 1
            elif st.kind == "lincomb":
                terms = tuple((_rename_poly(c, rename), env[v]) for c, v in st.terms)
                env[st.target] = new(st.target, k, "lincomb", terms=terms, source=st.text)
            elif st.kind == "dot":
                u, v = (lift(env[x], here) for x in st.pair)
                steps.append(ScalarStep(assign(st.target), st.text, dot=_bilinear(u, v)))
            elif st.kind == "scalar":
                tree = ast.parse(st.expression, mode="eval")
                for node in ast.walk(tree):
                    if isinstance(node, ast.Name):
                        node.id = rename(node.id)
                steps.append(ScalarStep(assign(st.target), st.text, expression=ast.unparse(tree)))
        segments.append(steps)
        budget.append(ops)
    final = {s: env[s] for s in method.state}
    carried = {name: ssa[name] for name in ssa if ssa[name] != name}
    residual = lift(start[method.residual], current[0])
    partner = lift(start[method.residual], current[0], "M") if method.norm == "natural" else residual
    return SymbolicIteration(method, versions, start, final, current, segments, budget, carried,
                             _bilinear(residual, partner))


def _rename_poly(poly, rename):
    out = Poly()
    for m, c in poly.terms.items():
        term = Poly.const(c)
        for s in m:
            term = term * Poly.symbol(rename(s))
        out = out + term
    return out


def lift(version, here, word=""):
    """``word`` applied to ``version`` as {Img: Poly} over the versions current at a point."""
    if version.kind == "apply":
        return lift(version.arg, here, word + version.word)
    if version.kind == "lincomb" and here.get(version.name) is not version:
        out = {}
        for c, t in version.terms:
            for img, ct in lift(t, here, word).items():
                out[img] = out[img] + c * ct if img in out else c * ct
        return {i: c for i, c in out.items() if c}
    return {Img(version, word): Poly.const(1)}


def _bilinear(a, b):
    out = {}
    for u, cu in a.items():
        for v, cv in b.items():
            pair = tuple(sorted((u, v)))
            out[pair] = out[pair] + cu * cv if pair in out else cu * cv
    return {p: c for p, c in out.items() if c}


def carried_temporaries(method):
    """Temporaries read before they are assigned: their value from the previous iteration,
    allowed when it is an operator image of a state that does not change after it."""
    stmts = method.parsed_iteration
    assigned, out = set(), {}
    for i, st in enumerate(stmts):
        for v in st.vectors_read():
            if v in assigned or v in method.state or v in method.constants or v in out:
                continue
            position = max(j for j, s in enumerate(stmts) if s.target == v)
            word, src = "", v
            while src not in method.state:
                d = max(j for j in range(position + 1) if stmts[j].target == src)
                if stmts[d].kind != "apply":
                    raise ValueError(f"{method.name}: {v!r} is used before it is assigned and is not "
                                     "an operator image of a state vector")
                word, src, position = word + stmts[d].word, stmts[d].source, d
            if any(s.target == src for s in stmts[position + 1:]):
                raise ValueError(f"{method.name}: {v!r} is used before it is assigned, but {src!r} "
                                 f"changes after it; carry {v!r} as a state vector")
            out[v] = (word, src)
        assigned.add(st.target)
    return out

