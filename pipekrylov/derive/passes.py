"""The transformation passes: method -> versions -> auxiliaries -> reductions -> schedule.

Each pass is a pure function from one form to the next, and every form prints readably
(``python -m pipekrylov derive cg`` shows them), so a test can look at each step.

The idea (Ghysels & Vanroose 2014; Cools & Vanroose 2017), made mechanical.  Every
assignment of a vector makes a new *version* of it; an operator application makes no new
vector but an *image* ``W v`` of a version (``W`` a word of operators, ``A M r``).
Split the iteration at its reduction points (one for CG, two for BiCGStab).  Then

1. ``introduce_auxiliaries``: an image of a version is either *maintained*, computed in
   the fused update that creates the version, as the image under ``W`` of the version's
   recurrence (``M A`` applied to ``p = u + beta*p`` gives ``MAp = MAu + beta*MAp``), or
   *direct*, computed by one operator from a stored vector while a reduction is in flight.
   A search over how long the maintained words may be keeps every dot on maintained
   images, spends exactly the base method's operator applications per segment (one SpMV
   stays one SpMV) and keeps as few vectors as possible;
2. ``fuse_reductions``: by bilinearity every dot of a segment is a combination of dots of
   images of the versions available at its reduction point, so all go into one reduction
   and the scalar recurrences are rewritten over its results;
3. ``schedule``: per segment, start the reduction, do the direct applications while it is
   in flight, wait, compute the scalars, update every vector in one fused pass that also
   computes the local parts of the next reduction;
4. ``residual_replacement``: periodically, or when an estimate of the drift between the
   recursive and the true residual crosses sqrt(eps) ||r|| (van der Vorst & Ye 2000, the
   criterion Cools et al. 2018 use for p-CG), recompute the residual and every maintained
   image from its definition.

``find_segments`` tries one reduction point per iteration first, then two.
"""
import ast
import itertools
from dataclasses import dataclass, field, replace

from .algebra import Poly

__all__ = ["symbolic_iteration", "introduce_auxiliaries", "fuse_reductions", "schedule",
           "residual_replacement", "find_segments", "NoPipelinedForm", "Version", "Img"]


MAX_WORD = 10  # longest operator word the search considers


class NoPipelinedForm(ValueError):
    """No choice of auxiliary vectors fits the base method's operator budget."""


# ------------------------------------------------------------------ 0. versions
@dataclass(frozen=True, eq=False)
class Version:
    """One value of a vector in the iteration.

    kind: 'start' (value at the top of the iteration), 'const', 'lincomb' (a recurrence,
    ``terms`` = ((Poly, Version), ...)) or 'apply' (``word`` applied to ``arg``).
    """

    name: str
    id: int
    segment: int          # where it is created (-1: before the iteration)
    kind: str
    terms: tuple = ()
    word: str = ""
    arg: "Version" = None
    source: str = ""

    def __repr__(self):
        return f"{self.name}#{self.id}"


class Img(tuple):
    """(Version, word): ``word`` applied to a version; ``name`` is its storage name."""

    def __new__(cls, version, word=""):
        return super().__new__(cls, (version, word))

    version = property(lambda self: self[0])
    word = property(lambda self: self[1])

    @property
    def name(self):
        return f"{self.word}{self.version.name}"

    @property
    def parent(self):
        return Img(self.version, self.word[1:])

    def __lt__(self, other):
        return (self.version.id, self.word) < (other.version.id, other.word)


@dataclass
class ScalarStep:
    """A scalar computed in a segment: from a dot (a bilinear form) or an expression."""

    name: str            # SSA name
    source: str
    expression: str = ""
    dot: dict = None     # {(Img, Img): Poly} at the segment's reduction point

    def __str__(self):
        if self.dot is not None:
            return f"{self.name} = " + " + ".join(f"({c})*({a.name}, {b.name})" for (a, b), c in self.dot.items())
        return f"{self.name} = {self.expression}"


@dataclass
class SymbolicIteration:
    method: object
    versions: list            # every Version, in creation order
    start: dict               # state -> its 'start' Version
    final: dict               # state -> its last Version in the iteration
    current: list             # per reduction point: {vector name: Version current there}
    segments: list            # per segment: [ScalarStep]
    budget: list              # per segment: {operator: applications}
    carried: dict             # scalar -> SSA name at the end
    norm: dict                # bilinear form of (residual, residual) or (residual, M residual) at point 0

    def __str__(self):
        lines = [f"versions of {self.method.name} ({len(self.segments)} segment(s), operators {self.budget}):"]
        for v in self.versions:
            if v.kind == "lincomb":
                rhs = " ".join(f"{'-' if s == '-' else '+'} {f + '*' if f else ''}{t!r}"
                               for c, t in v.terms for s, f in c.monomials())
                lines.append(f"  {v!r} = {rhs.lstrip('+ ')}   (segment {v.segment})")
            elif v.kind == "apply":
                lines.append(f"  {v!r} = {v.word} {v.arg!r}   (segment {v.segment})")
        for k, steps in enumerate(self.segments):
            lines += [f"  segment {k}: {s}" for s in steps]
        return "\n".join(lines)


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
    for temp, (word, state) in _carried_temporaries(method).items():
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


def _carried_temporaries(method):
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


# ------------------------------------------------------------------ 1. auxiliary vectors
@dataclass
class Auxiliaries:
    symbolic: SymbolicIteration
    maintained: list        # [Img] computed by recurrence in the update creating the version
    direct: list            # [(segment, Img)] computed by one operator during a reduction
    caps: dict              # Version -> longest maintained word
    late: list = field(default_factory=list)  # [(segment, Img)] recurrence in a later update

    def __str__(self):
        lines = ["auxiliary vectors:"]
        for img in self.maintained:
            if img.word:
                lines.append(f"  {img.name:>8} := {' '.join(img.word)} {img.version!r}   (recurrence)")
        for k, img in self.late:
            lines.append(f"  {img.name:>8} := {' '.join(img.word)} {img.version!r}   (recurrence, late: update {k})")
        for k, img in self.direct:
            lines.append(f"  {img.name:>8} := {img.word[0]} {img.parent.name}   (direct, overlapping reduction {k})")
        return "\n".join(lines)


def introduce_auxiliaries(sym, extra_words=3):
    """Choose which images are maintained by recurrences and which are computed directly."""
    capped = [v for v in sym.versions if v.kind == "lincomb"]
    dot_imgs = [(k, img) for k, steps in enumerate(sym.segments) for s in steps if s.dot
                for pair in s.dot for img in pair] + [(0, img) for pair in sym.norm for img in pair]
    low = {v: 0 for v in capped}
    for _, img in dot_imgs:
        key = _key(sym, img.version)
        if key in low:
            low[key] = max(low[key], len(img.word))
    best = None
    for extra in itertools.product(range(extra_words + 1), repeat=len(capped)):
        cap = {v: low[v] + e for v, e in zip(capped, extra)}
        found = _closure(sym, cap, dot_imgs)
        if found is not None:
            score = (len(found["maintained"]) + len(found["late"]), sum(extra))
            if best is None or score < best[0]:
                best = (score, cap, found)
    if best is None:
        raise NoPipelinedForm(f"{sym.method.name}: no auxiliary vectors fit the operator budget {sym.budget}")
    _, cap, found = best
    maintained = sorted(found["maintained"], key=lambda i: (i.version.id, len(i.word), i.word))
    late = sorted(found["late"], key=lambda d: (d[0], d[1].version.id, len(d[1].word)))
    direct = sorted(found["direct"], key=lambda d: (d[0], len(d[1].word), d[1].version.id))
    return Auxiliaries(sym, maintained, direct, cap, late)


def _key(sym, version):
    """A 'start' version's images are those of the state's final version (last iteration)."""
    return sym.final[version.name] if version.kind == "start" else version


def _closure(sym, cap, dot_imgs, trace=None):
    """See _closure_once; a second try seeds the direct images of final versions that the
    first one found, so that the next iteration can reuse them (the greedy order of the
    first try may have spent the budget before it knew of them)."""
    state = _closure_once(sym, cap, dot_imgs, trace)
    if isinstance(state, dict):
        return state
    if state is None:
        return None
    seed = sorted({(j, img) for j, img in state if img.version is sym.final.get(img.version.name)
                   and j > img.version.segment})  # sorted: the same search in every process
    state = _closure_once(sym, cap, dot_imgs, trace, seed)
    return state if isinstance(state, dict) else None


def _closure_once(sym, cap, dot_imgs, trace=None, seed=()):
    """Decide how each needed image is had; None when the choice of caps does not work.

    An image is needed at the reduction point of a segment (``when='point'``: dots, and
    the start of a chain of direct applications) or by its fused update (``'update'``).
    It is had in one of three ways, tried in this order:

    * maintained: its word is within the version's cap; computed by the recurrence in the
      update that creates the version and stored;
    * late: computed by the same recurrence in a later segment's update, from images
      available there (no operator application; as p-BiCGStab's ``A y = t - alpha v``);
    * direct: one operator applied, during the segment's reduction, to an image available
      at its point; counts against the base method's applications in that segment.
    """
    # sets are only searched, never iterated: the result must not depend on hash order,
    # which differs between processes (every rank derives the same method on its own)
    state = {"maintained": set(), "late": set(), "direct": set(seed)}

    def created(version):
        return -1 if version.kind == "start" else version.segment

    def stored_direct(version, word, seg, when):
        last = seg + (when == "update")
        if any((j, Img(version, word)) in state["direct"] for j in range(created(version) + 1, last)):
            return True
        if version.kind == "start":  # computed directly from the final version last iteration
            final = sym.final[version.name]
            return any((j, Img(final, word)) in state["direct"] for j in range(final.segment + 1, len(sym.segments)))
        return False

    def need(version, word, seg, when):
        ok = _need(version, word, seg, when)
        if trace is not None:
            trace.append(f"{'ok  ' if ok else 'FAIL'} {version!r} {word!r} seg {seg} {when}")
        return ok

    def _need(version, word, seg, when):
        if version.kind == "const":
            return not word
        if version.kind == "apply":
            return need(version.arg, word + version.word, seg, when)
        key = _key(sym, version)
        img = Img(key, word)
        born = created(version)
        if len(word) <= cap[key]:
            if born > seg or (born == seg and when == "point"):
                return False
            if img not in state["maintained"]:
                state["maintained"].add(img)
                if not all(need(t, word, key.segment, "update") for _, t in key.terms):
                    return False
            return True
        if when == "dot" or born >= seg or len(word) > MAX_WORD or \
                sym.current[seg].get(version.name) is not version:
            return False
        if stored_direct(version, word, seg, when):
            return True  # applied directly earlier (this iteration or, for a start vector, the last)
        if when == "update" and born >= 0:
            if (seg, img) in state["late"]:
                return True
            saved = {k: set(v) for k, v in state.items()}
            state["late"].add((seg, img))
            if all(need(t, word, seg, "update") for _, t in key.terms):
                return True
            state.update(saved)
        state["direct"].add((seg, Img(version, word)))
        return need(version, word[1:], seg, "point")

    if not all(need(img.version, img.word, k, "dot") for k, img in dot_imgs):
        return None
    if not all(need(v, "", len(sym.segments) - 1, "update") for v in sym.final.values()):
        return None
    if seed and not all(need(img.version, img.word, j, "update") for j, img in seed):
        return None
    for k, ops in enumerate(sym.budget):
        used = {}
        for seg, img in state["direct"]:
            if seg == k:
                used[img.word[0]] = used.get(img.word[0], 0) + 1
        if any(n > ops.get(op, 0) for op, n in used.items()):
            if trace is not None:
                trace.append(f"over budget in segment {k}: {used} > {ops}: {sorted(state['direct'])}")
            return state["direct"]
    return state


# ------------------------------------------------------------------ 2. reductions
@dataclass
class Reductions:
    auxiliaries: Auxiliaries
    pairs: list           # per point: [(Img, Img)], the local dots of its reduction
    scalars: list         # per point: [ScalarStep] with the dots over d[...]
    norm: str             # ||residual||^2 over point 0's results

    def __str__(self):
        lines = []
        for k, pairs in enumerate(self.pairs):
            lines.append(f"reduction {k}: {len(pairs)} dot products in one Iallreduce")
            lines += [f"  d[{j}] = ({a.name}, {b.name})" for j, (a, b) in enumerate(pairs)]
            if k == 0:
                lines.append(f"  {_norm_name(self.auxiliaries.symbolic.method)}^2 = {self.norm}")
            lines += [f"  {s}" for s in self.scalars[k]]
        return "\n".join(lines)


def fuse_reductions(aux):
    """Rewrite every dot of a segment over dots of images at its point; one reduction each."""
    sym = aux.symbolic
    all_pairs, all_scalars, norm = [], [], None
    for k, steps in enumerate(sym.segments):
        pairs = []

        def expression(form):
            terms = []
            for (a, b), c in form.items():
                pair = tuple(sorted((Img(_key(sym, a.version), a.word), Img(_key(sym, b.version), b.word))))
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


# ------------------------------------------------------------------ 3. schedule
@dataclass
class Phase:
    """One reduction point: start, overlapped applications, wait, scalars, fused update."""

    index: int
    pairs: list
    overlap: list         # [Img] applied directly while the reduction is in flight
    scalars: list
    checks: dict          # SSA scalar -> (condition, reason)
    updates: list         # [(Img, {Img: Poly}, stored, source)] in the order computed


@dataclass(eq=False)
class Schedule:
    """The pipelined iteration, phase by phase; ``str()`` is the readable algorithm."""

    method: object
    reductions: Reductions
    phases: list
    start: list           # images at point 0 computed at start-up, shortest words first
    carried: dict
    replacement: dict = field(default_factory=dict)
    depth: int = 1

    def __str__(self):
        m = self.method
        lines = [f"p-{m.name}: pipelined {m.title}, derived from the base method "
                 f"({len(self.phases)} reduction(s) per iteration, depth {self.depth})", "start-up:"]
        lines += [f"    {s}" for s in m.startup]
        lines += [f"    {img.name} = {img.word[0]} {img.parent.name}" for img in self.start]
        lines.append("iteration:")
        for ph in self.phases:
            lines.append(f"    start reduction {ph.index}: " +
                         ", ".join(f"({a.name}, {b.name})" for a, b in ph.pairs) + "   # one Iallreduce")
            for img in ph.overlap:
                lines.append(f"    {img.name} = {img.word[0]} {img.parent.name}   # overlaps reduction {ph.index}")
            lines.append(f"    d = wait for reduction {ph.index}")
            if ph.index == 0:
                lines.append(f"    {_norm_name(m)} = sqrt({self.reductions.norm}); stop if converged"
                             "   # from: the test at the top of the iteration")
            for s in ph.scalars:
                lines.append(f"    {s.name} = {s.expression}   # from: {s.source}")
                if s.name in ph.checks:
                    lines.append(f"        unless {ph.checks[s.name][0]}: stop with {ph.checks[s.name][1]}")
            if ph.index == len(self.phases) - 1:
                lines += [f"    {a} = {b}" for a, b in self.carried.items()]
            lines.append(f"    fused update (one pass over memory), with the local dots of reduction "
                         f"{(ph.index + 1) % len(self.phases)}:")
            for img, value, stored, source in ph.updates:
                rhs = _show_combination(value)
                lines.append(f"        {img.name if stored else '(' + img.name + ')'} = {rhs}   # from: {source}")
        if self.replacement:
            lines.append(f"residual replacement: {self.replacement['description']}")
        return "\n".join(lines)


def _norm_name(method):
    return f"||{method.residual}||" + ("_M" if method.norm == "natural" else "")


def _show_combination(value):
    parts = [f"{sign} {f + '*' if f else ''}{img.name}" for img, c in value.items() for sign, f in c.monomials()]
    text = " ".join(parts) or "0"
    return text[2:] if text.startswith("+ ") else text


def schedule(red):
    """Order each phase: reduction, overlapped applications, wait, scalars, fused update."""
    aux = red.auxiliaries
    sym = aux.symbolic
    method = sym.method
    K = len(sym.segments)
    checks = _checks(method, [s for ss in red.scalars for s in ss])
    phases = []
    for k in range(K):
        nxt = sym.current[k + 1] if k + 1 < K else {s: sym.start[s] for s in method.state}
        keep = {id(_key(sym, v)) for v in nxt.values() if v.kind != "const"}
        late = [img for seg, img in aux.late if seg == k]
        new = [img for img in aux.maintained if img.version.segment == k]
        updates = [_recurrence(sym, img, id(img.version) in keep and img not in late)
                   for img in sorted(late, key=lambda i: len(i.word)) + new]
        phases.append(Phase(k, red.pairs[k], [img for seg, img in aux.direct if seg == k], red.scalars[k],
                            {n: checks[n] for n in checks if any(s.name == n for s in red.scalars[k])}, updates))
    return Schedule(method, red, phases, _start_images(aux), sym.carried)


def _start_images(aux):
    """The images at point 0 that start-up computes by direct application: the maintained
    images of the states, those applied directly in a later segment of the last iteration
    (still stored when the next one starts), and every link of their chains.  Sorted on
    something the same in every process: each application is a halo exchange."""
    finals = {id(v) for v in aux.symbolic.final.values()}
    starts = {img for img in aux.maintained if img.word and id(img.version) in finals}
    starts |= {img for seg, img in aux.direct if id(img.version) in finals and seg > img.version.segment}
    for img in list(starts):
        while img.word:
            starts.add(img)
            img = img.parent
    return sorted(starts, key=lambda i: (len(i.word), i.version.id, i.word))


def _recurrence(sym, img, stored):
    """(image, {image: coefficient}, stored, source): the image of a version's recurrence."""
    value = {}
    for c, t in img.version.terms:
        src = _resolve(sym, t, img.word)
        value[src] = value[src] + c if src in value else c
    source = img.version.source
    if img.word:
        source = f"{' '.join(img.word)} applied to: {source}"
    return img, {i: c for i, c in value.items() if c}, stored, source


def _resolve(sym, version, word):
    """The image a recurrence term refers to, seen through operator temporaries."""
    while version.kind == "apply":
        word, version = word + version.word, version.arg
    return Img(_key(sym, version) if version.kind != "const" else version, word)


def _checks(method, scalars):
    out = {}
    for condition, reason in method.checks:
        tree = ast.parse(condition, mode="eval")
        (name,) = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
        ssa = next((s.name for s in scalars if s.name == name or
                    (s.name.startswith(name + "_") and s.name[len(name) + 1:].isdigit())), None)
        if ssa is None:
            raise ValueError(f"{method.name}: check {condition!r} names a scalar the iteration does not compute")
        for node in ast.walk(tree):
            if isinstance(node, ast.Name):
                node.id = ssa
        out[ssa] = (ast.unparse(tree), reason)
    return out


# ------------------------------------------------------------------ 4. residual replacement
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


# ------------------------------------------------------------------ driver helper
def find_segments(method):
    """The symbolic iteration and auxiliaries with the fewest reduction points that work."""
    try:
        sym = symbolic_iteration(method)
        return sym, introduce_auxiliaries(sym)
    except NoPipelinedForm:
        pass
    best = None
    for cut in range(1, len(method.parsed_iteration)):
        sym = symbolic_iteration(method, (cut,))
        if not all(any(s.dot for s in steps) for steps in sym.segments):
            continue  # a reduction point needs a dot product
        try:
            aux = introduce_auxiliaries(sym)
        except NoPipelinedForm:
            continue
        if best is None or len(aux.maintained) < len(best[1].maintained):
            best = (sym, aux)
    if best is None:
        raise NoPipelinedForm(f"{method.name}: no pipelined form with one or two reductions per iteration")
    return best
