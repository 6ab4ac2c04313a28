"""Pass 4: residual replacement (opt-in), added to a schedule."""
from dataclasses import replace

__all__ = ["residual_replacement"]


def residual_replacement(sched, every=None, automatic=True):
    """The schedule with residual replacement (a new schedule; ``sched`` is unchanged).

    Replacing recomputes ``r = b - A x`` and every maintained image of the state from its
    definition (as PETSc's pipecgrr does for r, u, w, s, q, z).

    every : int or None
        Replace every ``every`` iterations.
    automatic : bool
        Replace when the drift between the recursive residual and ``b - A x`` exceeds
        sqrt(eps) ||b - A x|| (the threshold of van der Vorst & Ye 2000 and Cools et al.
        2018); accept convergence only when ``b - A x`` meets the tolerance too, else
        restart the method from the current iterate.  The drift is measured every 25 iterations and when the
        recursive residual says converged (one SpMV and one small reduction each time),
        rather than bounded a priori: the a-priori bounds miss the amplification of
        rounding errors through the auxiliary recurrences of a pipelined method.
    """
    if not every and not automatic:
        return sched
    m = sched.method
    when = " or ".join(filter(None, [f"every {every} iterations" if every else "",
                                     "when the measured drift ||b - A x - r|| exceeds sqrt(eps) ||b - A x|| "
                                     "(checked every 25 iterations and at convergence)" if automatic else ""]))
    description = (f"{when}: {m.residual} = b - A {m.solution}, " +
                   "".join(f"{st}, " for st in m.invariants) + "then " +
                   ", ".join(f"{img.name} = {img.word[0]} {img.parent.name}" for img in sched.start))
    return replace(sched, replacement={"every": every, "automatic": automatic, "description": description})

