"""A direct interpreter of a method description: the reference a derivation is checked against.

It runs the base method's statements one by one with numpy on one process (scipy
matrix, dense-vector preconditioner), recording the residual norms at the top of each
iteration, as the solvers do.
"""
import numpy as np

from .execute import Executor
from .versions import carried_temporaries

__all__ = ["run_base"]


def run_base(method, A, b, M=None, iterations=20):
    """Residual norms ||r_k|| of the base method for k = 0..iterations (fewer on breakdown)."""
    ops = {"A": lambda v: A @ v, "M": (lambda v: v.copy()) if M is None else M}
    run = Executor(len(b), lambda op, v: ops[op](v))
    vec = run.vectors
    vec.update(b=np.asarray(b, dtype=float), x=np.zeros(len(b)))
    run(method.parsed_startup)
    for temp, (word, state) in carried_temporaries(method).items():
        vec[temp] = run.image(word, vec[state])
    norms = []
    for _ in range(iterations + 1):
        r = vec[method.residual]
        norms.append(float(np.sqrt(r @ (ops["M"](r) if method.norm == "natural" else r))))
        try:
            run(method.parsed_iteration)
        except ZeroDivisionError:
            break
    return np.array(norms)
