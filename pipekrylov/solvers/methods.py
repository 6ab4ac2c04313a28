"""The methods a :class:`~pipekrylov.solvers.solver.Solver` runs, by name."""
import re

__all__ = ["loop_spec", "METHODS"]

METHODS = ("cg", "cr", "bicgstab", "gmres", "p-cg", "p-cr", "p-bicgstab", "p-cgs", "p-cg-hs", "p-cg-gropp", "p-cg-pr",
           "p-cg2", "b-cg",
           "p(l)-cg",
           "p(l)-gmres", "s-cg", "s-gmres", "p-fcg", "p-gcr", "p-fgmres")


def loop_spec(method, depth=None, **options):
    """The :class:`~pipekrylov.loops.LoopSpec` of ``method``: a classic method's name
    (``"gmres"``'s option ``restart``), a derived one's (``"p-cg"``, options ``replace_every``, ``replace_automatic``), p(l)-CG
    (``"p(l)-cg"``, or ``"p-cg"`` with ``depth`` > 1; the options of
    :func:`pipekrylov.deep.plcg`), p(l)-GMRES (``"p(l)-gmres"``, the options of
    :func:`pipekrylov.deep.plgmres`), s-step CG (``"s-cg"`` with option ``s``, or
    ``"s(4)-cg"``), s-step GMRES (``"s-gmres"`` or ``"s(4)-gmres"``, options ``s`` and
    ``restart``), pipelined flexible CG and GCR (``"p-fcg"``, ``"p-gcr"``, options ``mmax`` and
    ``truncation``), pipelined flexible GMRES (``"p-fgmres"``, options ``restart`` and ``shift``),
    pipelined CG with one reduction per two iterations (``"p-cg2"``), or a
    :class:`pipekrylov.derive.Method` (derived).  ``"b-"`` before a derived method's
    name gives its blocking schedule: ``"b-cg"`` is single-reduction CG (Chronopoulos-Gear)."""
    deep = re.fullmatch(r"p\((\d+)\)-cg", method) if isinstance(method, str) else None
    if deep or (method == "p-cg" and depth not in (None, 1)):
        from ..deep.plcg import DeepCG
        return DeepCG(int(deep.group(1)) if deep else depth, **options)
    deep = re.fullmatch(r"p\((\d+)\)-gmres", method) if isinstance(method, str) else None
    if deep:
        from ..deep.plgmres import DeepGMRES
        return DeepGMRES(int(deep.group(1)), **options)
    sstep = re.fullmatch(r"s\((\d+)\)-(cg|gmres)", method) if isinstance(method, str) else None
    if sstep or method in ("s-cg", "s-gmres"):
        if sstep and "s" in options:
            raise TypeError(f"{method}: s is given by the name")
        if sstep:
            options["s"] = int(sstep.group(1))
        if (sstep.group(2) if sstep else method[2:]) == "cg":
            from ..loops.sstep import SStepCG
            return SStepCG(**options)
        from ..loops.sstep_gmres import SStepGMRES
        return SStepGMRES(**options)
    if depth not in (None, 1):
        raise ValueError(f"{method}: depth {depth} is for p(l)-CG ('p-cg' or 'p(l)-cg')")
    if method in ("p-fcg", "p-gcr"):
        from ..loops.flexible import Flexible
        return Flexible(method[2:], **options)
    if method == "p-cg2":
        if options:
            raise TypeError(f"{method}: unexpected options {', '.join(options)}")
        from ..loops.pipecg2 import PipeCG2
        return PipeCG2
    if method == "p-fgmres":
        from ..loops.pipefgmres import PipeFGMRES
        return PipeFGMRES(**options)
    if method == "gmres":
        from ..loops.gmres import gmres_spec
        return gmres_spec(**options)
    if isinstance(method, str) and not method.startswith(("p-", "b-")):
        if options:
            raise TypeError(f"{method}: unexpected options {', '.join(options)}")
        if method == "cg":
            from ..loops.cg import CG
            return CG
        if method == "cr":
            from ..loops.cr import CR
            return CR
        if method == "bicgstab":
            from ..loops.bicgstab import BICGSTAB
            return BICGSTAB
        hint = " (l or s is a number: 'p(2)-cg', 's(4)-gmres')" if re.fullmatch(r"[ps]\(\D[^)]*\)-\w+", method) else ""
        raise ValueError(f"unknown method {method!r}{hint}: choose from {', '.join(METHODS)}")
    from ..derive import derived_spec
    if isinstance(method, str) and method.startswith("b-"):
        return derived_spec(method[2:], blocking=True, **options)
    return derived_spec(method[2:] if isinstance(method, str) else method, **options)
