"""Pass 1: which images of the versions are stored, and how each is computed.

:func:`introduce_auxiliaries` searches over how long the maintained operator words may be
(docs/derivation.md, "The passes"); :func:`find_segments` tries one reduction point per
iteration, then two.  A *blocking* derivation maintains no image: each segment applies its
operators as the base method does, before its dots, so that its reduction overlaps nothing
(single-reduction CG from the Chronopoulos-Gear form).
"""
import itertools

from .forms import Auxiliaries, Img, NoPipelinedForm
from .versions import symbolic_iteration

__all__ = ["introduce_auxiliaries", "find_segments", "MAX_WORD"]

MAX_WORD = 10  # longest operator word the search considers


def introduce_auxiliaries(sym, extra_words=3, blocking=False):
    """Choose which images are maintained by recurrences and which are computed directly
    (``blocking``: every image of an operator directly, at the point of its segment)."""
    capped = [v for v in sym.versions if v.kind == "lincomb"]
    if blocking:
        found = _closure(sym, {v: 0 for v in capped}, _dot_images(sym), blocking=True)
        if found is None:
            raise NoPipelinedForm(f"{sym.method.name}: no blocking schedule within the operator budget {sym.budget}")
        return _auxiliaries(sym, found, {v: 0 for v in capped})
    dot_imgs = _dot_images(sym)
    low = {v: 0 for v in capped}
    for _, img in dot_imgs:
        key = sym.key(img.version)
        if key in low:
            low[key] = max(low[key], len(img.word))
    best = None
    for extra in itertools.product(range(extra_words + 1), repeat=len(capped)):
        cap = {v: low[v] + e for v, e in zip(capped, extra)}
        found = _closure(sym, cap, dot_imgs)
        if found is not None:
            score = (len(found.maintained) + len(found.late), sum(extra))
            if best is None or score < best[0]:
                best = (score, cap, found)
    if best is None:
        raise NoPipelinedForm(f"{sym.method.name}: no auxiliary vectors fit the operator budget {sym.budget}")
    _, cap, found = best
    return _auxiliaries(sym, found, cap)


def _dot_images(sym):
    """(segment, image) of every dot's images, the residual norm's at point 0."""
    return [(k, img) for k, steps in enumerate(sym.segments) for s in steps if s.dot
            for pair in s.dot for img in pair] + [(0, img) for pair in sym.norm for img in pair]


def _auxiliaries(sym, found, cap):
    maintained = sorted(found.maintained, key=lambda i: (i.version.id, len(i.word), i.word))
    late = sorted(found.late, key=lambda d: (d[0], d[1].version.id, len(d[1].word)))
    direct = sorted(found.direct, key=lambda d: (d[0], len(d[1].word), d[1].version.id))
    carried = sorted(found.carried, key=lambda i: (len(i.word), i.version.id, i.word))
    return Auxiliaries(sym, maintained, direct, cap, late, carried)


class Choice:
    """How each needed image is had, for one choice of caps (see :class:`ImageSearch`):
    ``maintained`` {Img}, ``late`` and ``direct`` {(segment, Img)}, and whether the direct
    applications fit the base method's operators per segment (``within_budget``)."""

    def __init__(self, seed=()):
        # sets are only searched, never iterated: the result must not depend on hash
        # order, which differs between processes (every rank derives on its own)
        self.maintained, self.late, self.direct = set(), set(), set(seed)
        self.carried = set()    # direct images of the last iteration read in this one
        self.within_budget = True

    def saved(self):
        return set(self.maintained), set(self.late), set(self.direct), set(self.carried)

    def restore(self, saved):
        self.maintained, self.late, self.direct, self.carried = (set(s) for s in saved)


def _closure(sym, cap, dot_imgs, trace=None, blocking=False):
    """The choice for ``cap``, or None when no choice works.  A second try seeds the direct
    images of final versions that the first one found, so that the next iteration can
    reuse them (the greedy order of the first try may have spent the budget before it
    knew of them)."""
    choice = ImageSearch(sym, cap, trace, blocking).run(dot_imgs)
    if choice is None or choice.within_budget:
        return choice
    seed = sorted({(j, img) for j, img in choice.direct if img.version is sym.final.get(img.version.name)
                   and j > img.version.segment})  # sorted: the same search in every process
    choice = ImageSearch(sym, cap, trace, blocking).run(dot_imgs, seed)
    return choice if choice is not None and choice.within_budget else None


class ImageSearch:
    """Decide how each needed image is had, for one choice of caps (the longest word
    maintained per version).

    An image is needed at the reduction point of a segment (``when='point'``: dots, and
    the start of a chain of direct applications) or by its fused update (``'update'``).
    It is had in one of three ways, tried in this order:

    * maintained: its word is within the version's cap; computed by the recurrence in the
      update that creates the version and stored;
    * late: computed by the same recurrence in a later segment's update, from images
      available there (no operator application; as p-BiCGStab's ``A y = t - alpha v``);
    * direct: one operator applied, during the segment's reduction, to an image available
      at its point; counts against the base method's applications in that segment.

    ``blocking``: a dot's image may be direct too (applied before the dots, not during
    the reduction), and none is late: the operators are applied as the base method does.
    """

    def __init__(self, sym, cap, trace=None, blocking=False):
        self.sym, self.cap, self.trace, self.blocking = sym, cap, trace, blocking

    def run(self, dot_imgs, seed=()):
        """The Choice that has every dot's images and every final version (None if there
        is none; ``within_budget`` False if it spends more operators than the base method)."""
        sym = self.sym
        self.choice = choice = Choice(seed)
        if not all(self.need(img.version, img.word, k, "dot") for k, img in dot_imgs):
            return None
        if not all(self.need(v, "", len(sym.segments) - 1, "update") for v in sym.final.values()):
            return None
        if seed and not all(self.need(img.version, img.word, j, "update") for j, img in seed):
            return None
        for k, ops in enumerate(sym.budget):
            used = {}
            for seg, img in choice.direct:
                if seg == k:
                    used[img.word[0]] = used.get(img.word[0], 0) + 1
            if any(n > ops.get(op, 0) for op, n in used.items()):
                self._say(f"over budget in segment {k}: {used} > {ops}: {sorted(choice.direct)}")
                choice.within_budget = False
        return choice

    def _say(self, line):
        if self.trace is not None:
            self.trace.append(line)

    @staticmethod
    def created(version):
        return -1 if version.kind == "start" else version.segment

    def stored_direct(self, version, word, seg, when):
        """Applied directly earlier: this iteration, or for a start version, the last."""
        direct, last = self.choice.direct, seg + (when == "update")
        if any((j, Img(version, word)) in direct for j in range(self.created(version) + 1, last)):
            return True
        if version.kind == "start":
            final = self.sym.final[version.name]
            if any((j, Img(final, word)) in direct for j in range(final.segment + 1, len(self.sym.segments))):
                self.choice.carried.add(Img(final, word))
                return True
        return False

    def need(self, version, word, seg, when):
        ok = self._need(version, word, seg, when)
        self._say(f"{'ok  ' if ok else 'FAIL'} {version!r} {word!r} seg {seg} {when}")
        return ok

    def _need(self, version, word, seg, when):
        sym, choice = self.sym, self.choice   # one Choice per run, changed in place
        if version.kind == "const":
            return not word
        if version.kind == "apply":
            return self.need(version.arg, word + version.word, seg, when)
        key = sym.key(version)
        img = Img(key, word)
        born = self.created(version)
        if len(word) <= self.cap[key]:
            if born > seg or (born == seg and when == "point"):
                return False
            if img not in choice.maintained:
                choice.maintained.add(img)
                if not all(self.need(t, word, key.segment, "update") for _, t in key.terms):
                    return False
            return True
        if (when == "dot" and not self.blocking) or born >= seg or len(word) > MAX_WORD or \
                sym.current[seg].get(version.name) is not version:
            return False
        if self.stored_direct(version, word, seg, when):
            return True
        if when == "update" and born >= 0 and not self.blocking:
            if (seg, img) in choice.late:
                return True
            saved = choice.saved()
            choice.late.add((seg, img))
            if all(self.need(t, word, seg, "update") for _, t in key.terms):
                return True
            choice.restore(saved)
        choice.direct.add((seg, Img(version, word)))
        return self.need(version, word[1:], seg, "point")


def find_segments(method, blocking=False):
    """The symbolic iteration and auxiliaries with the fewest reduction points that work
    (or with the method's own reduction points)."""
    if method.cuts:
        sym = symbolic_iteration(method, method.cuts)
        if not all(any(s.dot for s in steps) for steps in sym.segments):
            raise NoPipelinedForm(f"{method.name}: each reduction point needs a dot product after it")
        return sym, introduce_auxiliaries(sym, blocking=blocking)
    try:
        sym = symbolic_iteration(method)
        return sym, introduce_auxiliaries(sym, blocking=blocking)
    except NoPipelinedForm:
        pass
    best = None
    for cut in range(1, len(method.parsed_iteration)):
        sym = symbolic_iteration(method, (cut,))
        if not all(any(s.dot for s in steps) for steps in sym.segments):
            continue  # a reduction point needs a dot product
        try:
            aux = introduce_auxiliaries(sym, blocking=blocking)
        except NoPipelinedForm:
            continue
        if best is None or len(aux.maintained) < len(best[1].maintained):
            best = (sym, aux)
    if best is None:
        raise NoPipelinedForm(f"{method.name}: no {'blocking schedule' if blocking else 'pipelined form'} with one "
                              "or two reductions per iteration")
    return best
