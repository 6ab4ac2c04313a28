"""Pass 3: the schedule.  Per reduction point: start the reduction, apply the direct
operators while it is in flight, wait, compute the scalars, then one fused update that
also computes the local dots of the next reduction.  A blocking schedule applies its
operators first, then takes its dots and waits for their reduction."""
import ast

from .forms import Img, Phase, Schedule, resolve

__all__ = ["schedule"]


def schedule(red, blocking=False):
    """Order each phase: reduction, overlapped applications, wait, scalars, fused update
    (``blocking``: applications, dots, reduction, scalars, update)."""
    aux = red.auxiliaries
    sym = aux.symbolic
    method = sym.method
    K = len(sym.segments)
    checks = _checks(method, [s for ss in red.scalars for s in ss])
    phases = []
    for k in range(K):
        nxt = sym.current[k + 1] if k + 1 < K else {s: sym.start[s] for s in method.state}
        keep = {id(sym.key(v)) for v in nxt.values() if v.kind != "const"}
        late = [img for seg, img in aux.late if seg == k]
        new = [img for img in aux.maintained if img.version.segment == k]
        updates = [_recurrence(sym, img, id(img.version) in keep and img not in late)
                   for img in sorted(late, key=lambda i: len(i.word)) + new]
        phases.append(Phase(k, red.pairs[k], [img for seg, img in aux.direct if seg == k], red.scalars[k],
                            {n: checks[n] for n in checks if any(s.name == n for s in red.scalars[k])}, updates))
    return Schedule(method, red, phases, _start_images(aux, blocking), sym.carried, blocking=blocking)


def _start_images(aux, blocking=False):
    """The images at point 0 that start-up computes by direct application: the maintained
    images of the states, those applied directly in a later segment of the last iteration
    (still stored when the next one starts), and every link of their chains.  Sorted on
    something the same in every process: each application is a halo exchange.  A blocking
    phase applies what it reads itself: only what an iteration reads of the last one's
    (BiCGStab's ``v``) is made at start-up."""
    finals = {id(v) for v in aux.symbolic.final.values()}
    if blocking:
        starts = set(aux.carried)
    else:
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
        src = resolve(t, img.word)
        if src.version.kind != "const":
            src = Img(sym.key(src.version), src.word)
        value[src] = value[src] + c if src in value else c
    source = img.version.source
    if img.word:
        source = f"{' '.join(img.word)} applied to: {source}"
    return img, {i: c for i, c in value.items() if c}, stored, source


def _checks(method, scalars):
    out = {}
    for condition, reason, *_ in method.checks:
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

