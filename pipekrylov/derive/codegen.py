"""Code generation: a Schedule becomes the code a solver runs (source text and kernels).

Per reduction point one Numba kernel: the fused update of that segment with the local
dot products of the next reduction, in one pass over memory.  :func:`generate` returns
them with the schedule's scalar steps compiled and the storage the solver needs;
``code.source`` prints the schedule and the kernels.  The loop that runs them is generated
by :mod:`.loopgen` (one function, compiled or interpreted; its hooks: :mod:`.solver`).
"""
import numpy as np

from ..kernels.compile import compile_source
from .forms import Img, resolve

__all__ = ["generate", "GeneratedCode", "FusedUpdate", "CHECK_EVERY"]

CHECK_EVERY = 25  # iterations between two measurements of the residual drift


class FusedUpdate:
    """The fused update kernel of one segment, with the local dots of the next reduction."""

    def __init__(self, sched, k):
        aux = sched.reductions.auxiliaries
        sym = aux.symbolic
        self.k = k
        K = len(sym.segments)
        late = [img for seg, img in aux.late if seg == k]
        new = [img for img in aux.maintained if img.version.segment == k]
        nxt = (k + 1) % K
        # a blocking schedule takes its dots after its operators, not in the update
        self.pairs = [] if sched.blocking else list(sched.reductions.pairs[nxt])
        end = sym.current[k + 1] if k + 1 < K else {s: sym.final[s] for s in sym.method.state}
        loads, stores, scalars, lines = [], [], [], []
        computed = {}

        def ref(img):
            img = resolve(*img)
            if img in computed:
                return computed[img]
            name = img.name
            if name not in loads:
                loads.append(name)
            return f"{name}_o"

        def combination(version, word):
            parts = []
            for c, t in version.terms:
                r = ref(resolve(t, word))
                for sign, factor in c.monomials():
                    for s in factor.split("*") if factor else []:
                        if not s[0].isdigit() and s not in scalars:
                            scalars.append(s)
                    parts.append(f"{sign} {factor + '*' if factor else ''}{r}")
            text = " ".join(parts) or "0.0"
            return text[2:] if text.startswith("+ ") else text

        # late images first (they read only older, stored vectors), then the new versions
        for img in sorted(late, key=lambda i: len(i.word)):
            local = f"{img.name}_l{img.version.id}"
            lines.append(f"{local} = {combination(img.version, img.word)}")
            computed[img] = local
        for img in new:
            local = f"{img.name}_n{img.version.id}"
            lines.append(f"{local} = {combination(img.version, img.word)}")
            computed[img] = local
            if end.get(img.version.name) is img.version:
                stores.append((img.name, local))
        dots = []
        for a, b in self.pairs:
            dots.append(f"{self._dot_ref(a, end, computed, ref)} * {self._dot_ref(b, end, computed, ref)}")
        self.arrays = list(dict.fromkeys(loads + [s for s, _ in stores]))
        self.scalars = scalars
        body = [f"def fused({', '.join(self.arrays)}, coef, out):"]
        body += [f"    {s} = coef[{j}]" for j, s in enumerate(scalars)]
        body += [f"    d{j} = 0.0" for j in range(len(dots))]
        body.append(f"    for i in range({self.arrays[0]}.shape[0]):")
        body += [f"        {n}_o = {n}[i]" for n in loads]
        body += [f"        {line}" for line in lines]
        body += [f"        {n}[i] = {local}" for n, local in stores]
        body += [f"        d{j} += {d}" for j, d in enumerate(dots)]
        body += [f"    out[{j}] = d{j}" for j in range(len(dots))]
        self.source = "\n".join(body) + "\n"
        signature = "void(" + ", ".join(["float64[::1]"] * (len(self.arrays) + 2)) + ")"
        self.kernel = compile_source(self.source, "fused", [signature], noalias=True)
        self.coef = np.zeros(max(1, len(scalars)))
        self.out = np.zeros(max(1, len(dots)))
        self.ndots = len(dots)

    @staticmethod
    def _dot_ref(img, end, computed, ref):
        current = end.get(img.version.name)
        target = Img(current, img.word) if current is not None and current.kind != "start" else img
        return computed.get(target) or ref(img)

    def __call__(self, vec, scal):
        for j, s in enumerate(self.scalars):
            self.coef[j] = scal[s]
        self.kernel(*[vec[n] for n in self.arrays], self.coef, self.out)
        return self.out[:self.ndots].copy()


class GeneratedCode:
    """What a schedule generates: the fused kernels, the
    vectors to store, the residual-replacement periods, and ``source`` to print."""

    def __init__(self, sched):
        self.schedule = sched
        aux = sched.reductions.auxiliaries
        self.sym = sym = aux.symbolic
        self.method = sym.method
        self.segments = [FusedUpdate(sched, k) for k in range(len(sym.segments))]
        self.start_images = sched.start
        names = {img.name for img in aux.maintained} | {img.name for _, img in aux.direct}
        names |= {img.name for _, img in aux.late} | set(self.method.state)
        names |= {img.name for img in self.start_images}
        names |= {i.name for pairs in sched.reductions.pairs for p in pairs for i in p}
        self.storage = sorted(names - set(self.method.constants))
        self.source = self._describe()
        # residual replacement: every k iterations, and/or the drift checked every CHECK_EVERY
        self.replace_every = sched.replacement.get("every")
        self.check_every = CHECK_EVERY if sched.replacement.get("automatic") else None

    def _describe(self):
        out = [f"# generated from: {self.method.title}", str(self.schedule), ""]
        for seg in self.segments:
            out.append(f"# fused kernel of segment {seg.k}:")
            out.append(seg.source)
        return "\n".join(out)


def generate(sched):
    """The generated code of a schedule."""
    return GeneratedCode(sched)
