"""The forms a derivation passes through, from the symbolic iteration to the schedule.

Each form is a plain dataclass that prints readably (``python -m pipekrylov derive cg
--passes`` shows them all).  The passes, each a pure function from one form to the next,
are :mod:`.versions`, :mod:`.auxiliaries`, :mod:`.reductions`, :mod:`.scheduling` and
:mod:`.replacement`; docs/derivation.md walks through them.
"""
from dataclasses import dataclass, field

__all__ = ["NoPipelinedForm", "Version", "Img", "ScalarStep", "SymbolicIteration", "Auxiliaries",
           "Reductions", "Phase", "Schedule", "resolve", "norm_name", "show_combination"]


class NoPipelinedForm(ValueError):
    """No choice of auxiliary vectors fits the base method's operator budget."""



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


def resolve(version, word=""):
    """The image ``word`` applied to ``version`` denotes, seen through operator temporaries
    (``v = A p`` then ``M v`` is ``MA p``)."""
    while version.kind == "apply":
        word, version = word + version.word, version.arg
    return Img(version, word)


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

    def key(self, version):
        """The version whose images stand for ``version``'s: a 'start' version's images
        are those of the state's final version (made in the last iteration)."""
        return self.final[version.name] if version.kind == "start" else version


@dataclass
class Auxiliaries:
    symbolic: SymbolicIteration
    maintained: list        # [Img] computed by recurrence in the update creating the version
    direct: list            # [(segment, Img)] computed by one operator during a reduction
    caps: dict              # Version -> longest maintained word
    late: list = field(default_factory=list)  # [(segment, Img)] recurrence in a later update
    carried: list = field(default_factory=list)  # [Img] applied directly in the last iteration, read here

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
                lines.append(f"  {norm_name(self.auxiliaries.symbolic.method)}^2 = {self.norm}")
            lines += [f"  {s}" for s in self.scalars[k]]
        return "\n".join(lines)


@dataclass
class Phase:
    """One reduction point: start, overlapped applications, wait, scalars, fused update
    (blocking: the applications come first)."""

    index: int
    pairs: list
    overlap: list         # [Img] applied directly while the reduction is in flight (blocking: before it)
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
    blocking: bool = False   # operators, then dots, then the reduction: nothing overlapped

    @property
    def name(self):
        return f"{'b' if self.blocking else 'p'}-{self.method.name}"

    def __str__(self):
        m = self.method
        if self.blocking:
            lines = [f"{self.name}: {m.title} with its dots fused, derived from the base method "
                     f"({len(self.phases)} blocking reduction(s) per iteration)", "start-up:"]
        else:
            lines = [f"{self.name}: pipelined {m.title}, derived from the base method "
                     f"({len(self.phases)} reduction(s) per iteration, depth {self.depth})", "start-up:"]
        lines += [f"    {s}" for s in m.startup]
        lines += [f"    {img.name} = {img.word[0]} {img.parent.name}" for img in self.start]
        lines.append("iteration:")
        for ph in self.phases:
            dots = ", ".join(f"({a.name}, {b.name})" for a, b in ph.pairs)
            if self.blocking:
                lines += [f"    {img.name} = {img.word[0]} {img.parent.name}" for img in ph.overlap]
                lines.append(f"    d = reduction {ph.index}: {dots}   # one Allreduce")
            else:
                lines.append(f"    start reduction {ph.index}: {dots}   # one Iallreduce")
                lines += [f"    {img.name} = {img.word[0]} {img.parent.name}   # overlaps reduction {ph.index}"
                          for img in ph.overlap]
                lines.append(f"    d = wait for reduction {ph.index}")
            if ph.index == 0:
                lines.append(f"    {norm_name(m)} = sqrt({self.reductions.norm}); stop if converged"
                             "   # from: the test at the top of the iteration")
            for s in ph.scalars:
                lines.append(f"    {s.name} = {s.expression}   # from: {s.source}")
                if s.name in ph.checks:
                    lines.append(f"        unless {ph.checks[s.name][0]}: stop with {ph.checks[s.name][1]}")
            if ph.index == len(self.phases) - 1:
                lines += [f"    {a} = {b}" for a, b in self.carried.items()]
            lines.append("    fused update (one pass over memory):" if self.blocking else
                         "    fused update (one pass over memory), with the local dots of reduction "
                         f"{(ph.index + 1) % len(self.phases)}:")
            for img, value, stored, source in ph.updates:
                rhs = show_combination(value)
                lines.append(f"        {img.name if stored else '(' + img.name + ')'} = {rhs}   # from: {source}")
        if self.replacement:
            lines.append(f"residual replacement: {self.replacement['description']}")
        return "\n".join(lines)


def norm_name(method):
    return f"||{method.residual}||" + ("_M" if method.norm == "natural" else "")


def show_combination(value):
    parts = [f"{sign} {f + '*' if f else ''}{img.name}" for img, c in value.items() for sign, f in c.monomials()]
    text = " ".join(parts) or "0"
    return text[2:] if text.startswith("+ ") else text
