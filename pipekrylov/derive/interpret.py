"""A direct interpreter of a method description: the reference a derivation is checked against.

It runs the base method's statements one by one with numpy on one process (scipy
matrix, dense-vector preconditioner), recording the residual norms at the top of each
iteration, as the solvers do.
"""
import ast

import numpy as np

__all__ = ["run_base"]


def run_base(method, A, b, M=None, iterations=20):
    """Residual norms ||r_k|| of the base method for k = 0..iterations (fewer on breakdown)."""
    vec = {"b": np.asarray(b, dtype=float), "x": np.zeros(len(b))}
    scal = {}
    ops = {"A": lambda v: A @ v, "M": (lambda v: v.copy()) if M is None else M}

    def execute(st):
        if st.kind == "apply":
            value = vec[st.source]
            for op in reversed(st.word):
                value = ops[op](value)
            vec[st.target] = value
        elif st.kind == "zero":
            vec[st.target] = np.zeros(len(b))
        elif st.kind == "lincomb":
            vec[st.target] = sum(_value(c, scal) * vec[v] for c, v in st.terms)
        elif st.kind == "dot":
            scal[st.target] = float(vec[st.pair[0]] @ vec[st.pair[1]])
        elif st.kind == "scalar":
            scal[st.target] = eval(compile(ast.parse(st.expression, mode="eval"), "<method>", "eval"), {}, scal)

    for st in method.parsed_startup:
        execute(st)
    from .passes import _carried_temporaries
    for temp, (word, state) in _carried_temporaries(method).items():
        value = vec[state]
        for op in reversed(word):
            value = ops[op](value)
        vec[temp] = value
    norms = []
    for _ in range(iterations + 1):
        r = vec[method.residual]
        norms.append(float(np.sqrt(r @ (ops["M"](r) if method.norm == "natural" else r))))
        try:
            for st in method.parsed_iteration:
                execute(st)
        except ZeroDivisionError:
            break
    return np.array(norms)


def _value(poly, scal):
    total = 0.0
    for monomial, c in poly.terms.items():
        term = float(c)
        for s in monomial:
            term *= scal[s]
        total += term
    return total
