"""Pipelined solvers through one door: ``pipekrylov.pipelined(method, depth)``.

Depth 1 is the derivation framework's (:mod:`pipekrylov.derive`: any base method, or a
:class:`~pipekrylov.derive.Method` of your own); p(l)-CG (``"cg"``, depth > 1) and
p(l)-GMRES (``"gmres"``) are the deep templates' (:mod:`pipekrylov.deep`).  The choice
is made here and only here: ``derive`` knows nothing of ``deep`` (``deep`` uses
``derive`` for its hand-over to p-CG).
"""
import functools

__all__ = ["pipelined", "algorithm", "is_deep"]


def is_deep(method, depth=1):
    """Is ``pipelined(method, depth)`` a deep template (p(l)-CG, p(l)-GMRES)?"""
    return isinstance(method, str) and (method == "gmres" or (method == "cg" and depth > 1))


def pipelined(method, depth=1, **options):
    """The pipelined solver of ``method`` at ``depth``, with the classic solvers' signature.

    Depth 1: :func:`pipekrylov.derive.pipelined` (``options``: ``replace_every``,
    ``replace_automatic``, ``check``).  ``pipelined("cg", depth=l)`` for ``l > 1`` and
    ``pipelined("gmres", depth=l)``: :func:`pipekrylov.deep.plcg` /
    :func:`~pipekrylov.deep.plgmres` with the depth bound (their options, ``shifts``,
    ``restart``, ..., pass through at the call).
    """
    from .derive import check_depth
    check_depth(depth)
    if not is_deep(method, depth):
        from .derive import pipelined as derived
        return derived(method, depth, **options)
    if options:
        raise TypeError(f"pipelined({method!r}, depth={depth}): {', '.join(options)} are options of the "
                        "derived methods; a deep template takes its options at the call")
    return _deep(method, depth)


@functools.lru_cache(maxsize=None)
def _deep(name, depth):
    from . import deep
    if name == "cg" and depth > deep.MAX_DEPTH:
        raise ValueError(f"depth must be an integer from 1 to {deep.MAX_DEPTH} for p(l)-CG, got {depth}")
    template = deep.plcg if name == "cg" else deep.plgmres
    listing = algorithm(name, depth)

    def solver(A, b, x0=None, **options):
        return template(A, b, x0, depth=depth, **options)

    solver.__name__ = f"p{depth}_{name}"
    solver.__doc__ = f"p({depth})-{name.upper()}: see {template.__module__}.\n\n" + str(listing)
    solver.schedule = listing
    solver.depth = depth
    return solver


def algorithm(method, depth=1, replace_every=None, replace_automatic=False):
    """The printable pipelined algorithm: the derived schedule, or the deep template's
    listing (:class:`pipekrylov.deep.listing.DeepAlgorithm`)."""
    from .derive import check_depth, derive
    check_depth(depth)
    if is_deep(method, depth):
        from .deep.listing import deep_algorithm
        return deep_algorithm(method, depth)
    return derive(method, depth, replace_every, replace_automatic)
