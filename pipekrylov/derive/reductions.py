"""Pass 2: one reduction per reduction point.  By bilinearity every dot of a segment is
a combination of dots of images available at its point: all go into one ``Iallreduce``
and the scalar recurrences are rewritten over its results ``d[j]``."""
from .forms import Img, Reductions, ScalarStep

__all__ = ["fuse_reductions"]


def fuse_reductions(aux):
    """Rewrite every dot of a segment over dots of images at its point; one reduction each."""
    sym = aux.symbolic
    all_pairs, all_scalars, norm = [], [], None
    for k, steps in enumerate(sym.segments):
        pairs = []

        def expression(form):
            terms = []
            for (a, b), c in form.items():
                pair = tuple(sorted((Img(sym.key(a.version), a.word), Img(sym.key(b.version), b.word))))
                if pair not in pairs:
                    pairs.append(pair)
                j = pairs.index(pair)
                terms += [f"{sign} {f + '*' if f else ''}d[{j}]" for sign, f in c.monomials()]
            text = " ".join(terms) or "0.0"
            return text[2:] if text.startswith("+ ") else text

        if k == 0:
            norm = expression(sym.norm)
        all_scalars.append([ScalarStep(s.name, s.source, expression=expression(s.dot)) if s.dot else s
                            for s in steps])
        all_pairs.append(pairs)
    return Reductions(aux, all_pairs, all_scalars, norm)

