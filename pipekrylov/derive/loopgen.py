"""Code generation for the compiled loop: a generated solver's whole iteration as one
Numba function (source text only; :mod:`.compiled` runs it).

The loop does per iteration what :class:`.pyloop.PythonLoop` does in Python:
start each reduction (``MPI_Iallreduce``), apply the operators that overlap it (the
SpMV with its halo exchange, the preconditioner: none, Jacobi or block-Jacobi
ILU(0)/IC(0)) poking the reduction with ``MPI_Test`` every few rows, wait, test for
convergence, compute the scalars with their breakdown checks, and run the segment's
fused update, the kernel the Python loop calls.  The scalar expressions are the
schedule's, renamed to locals.  What happens rarely (a convergence to confirm against
the true residual, a breakdown, a residual replacement, a callback, a monitor line, a
full trace buffer) ends the call with an *event* code; the driver handles it in
Python with the Python loop's own code and calls the loop again where it stopped.
That keeps the two loops' results bit for bit the same.

``print(loop_source(solver))`` shows the generated module.
"""
import ast
import builtins

from ..parallel.runtime import EVENTS, RESUME_BEGIN, FloatSlot, IntSlot, runtime_source

__all__ = ["loop_source", "startup_source"]

_BUILTINS = set(dir(builtins))


class _Renamer(ast.NodeTransformer):
    def __init__(self, scalars):
        self.scalars = scalars

    def visit_Name(self, node):
        keep = node.id == "d" or (node.id in _BUILTINS and node.id not in self.scalars)
        return ast.copy_location(ast.Name(id=node.id if keep else f"s_{node.id}", ctx=node.ctx), node)


def _local(expression, scalars):
    """A schedule's scalar expression over locals (``gamma / gamma_old`` ->
    ``s_gamma / s_gamma_old``; the reduction's results ``d[j]`` and builtins such as
    ``abs`` stay)."""
    return ast.unparse(_Renamer(scalars).visit(ast.parse(expression, mode="eval")))


def _constant(expression):
    """Whether a start-up scalar is a constant (``float('inf')``, ``1``)."""
    try:
        eval(expression, {"__builtins__": {"float": float, "int": int}}, {})
        return True
    except NameError:
        return False


def _names(expression, scalars=()):
    """The scalars an expression names (not ``d``, not builtins unless a scalar has the name)."""
    return [n.id for n in ast.walk(ast.parse(expression, mode="eval")) if isinstance(n, ast.Name)
            and n.id != "d" and (n.id not in _BUILTINS or n.id in scalars)]


def loop_source(solver, rows, begin=False):
    """The generated module of ``solver`` (a :class:`.codegen.GeneratedCode`); ``rows``
    maps each vector's name to its index in the loop's tuple of vectors ``V``; with
    ``begin``, a call resumed at RESUME_BEGIN runs the compiled start-up
    (:func:`startup_source`) first, saving a call into compiled code per solve.  Returns
    ``(source, scalars, checks)``: the scalar names in the order of the state array
    ``S``, and the breakdown checks ``(name, condition, reason)`` by their index."""
    sched = solver.schedule
    K = len(solver.segments)
    scalars, checks = [], []

    def scalar(name):
        if name not in scalars:
            scalars.append(name)

    defined = {st.name for ph in sched.phases for st in ph.scalars} | set(sched.carried)
    defined |= {st.target for st in solver.method.parsed_startup if st.kind in ("scalar", "dot")}
    for ph in sched.phases:
        for st in ph.scalars:
            scalar(st.name)
            for n in _names(st.expression, defined):
                scalar(n)
    for a, b in sched.carried.items():
        scalar(a)
        scalar(b)
    for seg in solver.segments:
        for s in seg.scalars:
            scalar(s)
    for n in _names(sched.reductions.norm, defined):
        scalar(n)
    known = set(scalars)

    I, F = IntSlot, FloatSlot
    out = [f"# the compiled loop of: {solver.method.title}", runtime_source()]
    for seg in solver.segments:
        out.append(f"from {seg.kernel.py_func.__module__} import fused as fused_{seg.k}")
    out += ["", "",
            "def loop(V, S, D, C, I, F, hist, trace, send, A, P, R):",
            "    # the vectors",
            *[f"    v_{name} = V[{row}]" for name, row in rows.items()],
            "    # the scalars",
            *[f"    s_{name} = S[{j}]" for j, name in enumerate(scalars)],
            "    d = D",
            f"    iteration = I[{I.ITERATION}]",
            f"    resume = I[{I.RESUME}]",
            *([f"    if resume == {RESUME_BEGIN}:   # the start-up first",
               "        begin_inline(V, send, I, F, A, P, R)",
               f"        if I[{I.MPI_ERROR}] != 0:",
               f"            return {EVENTS.index('mpi_error')}",
               "        resume = 0"] if begin else []),
            "    event = -1",
            "    while True:"]
    body = []

    def emit(line, depth=0):
        body.append("        " + "    " * depth + line)

    def stop(name, depth):
        emit(f"event = {EVENTS.index(name)}  # {name}", depth)
        emit("break", depth)

    def reduction(k, depth):
        ph = sched.phases[k]
        emit(f"# reduction {k}: " + ", ".join(f"({a.name}, {b.name})" for a, b in ph.pairs), depth)
        emit(f"start(send, {len(ph.pairs)}, D, R, I, F, trace)", depth)
        emit(f"trace[I[{I.TRACE}], 1] = MPI_Wtime()", depth)
        emit(f"trace[I[{I.TRACE}], 5] = {k}", depth)
        for img in ph.overlap:
            src, dst = img.parent.name, img.name
            call = "spmv" if img.word[0] == "A" else "precondition"
            operands = "A" if img.word[0] == "A" else "P"
            emit(f"{call}(v_{src}, v_{dst}, {operands}, R, I, F, True)   # {dst} = {img.word[0]} {src}", depth)
        emit(f"trace[I[{I.TRACE}], 2] = MPI_Wtime()", depth)
        emit("wait(R, I, F, trace)", depth)
        emit(f"if I[{I.MPI_ERROR}] != 0:", depth)
        stop("mpi_error", depth + 1)
        emit(f"if d[{len(ph.pairs)}] > 0.0:", depth)
        stop("failed", depth + 1)

    def phase(k, depth):
        ph = sched.phases[k]
        for st in ph.scalars:
            emit(f"s_{st.name} = {_local(st.expression, known)}", depth)
            if st.name in ph.checks:
                condition, reason = ph.checks[st.name]
                emit(f"if not ({_local(condition, known)}):", depth)
                emit(f"I[{I.CHECK}] = {len(checks)}", depth + 1)
                emit(f"F[{F.VALUE}] = s_{st.name}", depth + 1)
                stop("breakdown", depth + 1)
                checks.append((st.name, condition, reason))
        if k == K - 1:
            for a, b in sched.carried.items():
                emit(f"s_{a} = s_{b}", depth)
        seg = solver.segments[k]
        for j, s in enumerate(seg.scalars):
            emit(f"C[{k}, {j}] = s_{s}", depth)
        emit(f"fused_{k}({', '.join('v_' + a for a in seg.arrays)}, C[{k}], send)   # and the local dots", depth)

    emit("if resume == 0:")
    emit(f"if I[{I.HIST}] >= hist.shape[0] or I[{I.TRACE}] + {K} > trace.shape[0]:", 1)
    stop("flush", 2)
    reduction(0, 1)
    emit(f"value = {_local(sched.reductions.norm, known)}", 1)
    emit("rnorm = np.sqrt(0.0 if 0.0 > value else value)", 1)
    emit(f"F[{F.RNORM}] = rnorm", 1)
    emit(f"if I[{I.STOP_AT_TEST}] != 0:", 1)
    stop("tested", 2)
    emit(f"hist[I[{I.HIST}]] = rnorm", 1)
    emit(f"I[{I.HIST}] += 1", 1)
    emit("if not np.isfinite(rnorm):", 1)
    stop("nanorinf", 2)
    emit(f"if rnorm <= F[{F.ATOL}]:", 1)
    stop("converged", 2)
    emit(f"if iteration == I[{I.MAXITER}]:", 1)
    stop("maxiter", 2)
    emit("resume = 0")
    phase(0, 0)
    for k in range(1, K):
        reduction(k, 0)
        phase(k, 0)
    emit("# the end of the iteration")
    emit(f"I[{I.DONE}] = iteration + 1")
    emit(f"if I[{I.STOP_EVERY}] != 0 or (I[{I.REPLACE_EVERY}] > 0 and (iteration + 1) % I[{I.REPLACE_EVERY}] == 0) "
         f"or (I[{I.CHECK_EVERY}] > 0 and (iteration + 1) % I[{I.CHECK_EVERY}] == 0):")
    stop("iterated", 1)
    emit("iteration += 1")
    out += body
    out += [f"    I[{I.ITERATION}] = iteration",
            *[f"    S[{j}] = s_{name}" for j, name in enumerate(scalars)],
            "    return event", ""]
    return "\n".join(out), scalars, checks


def startup_source(solver, rows):
    """The start-up's vector statements, the images at point 0 and the first local dots
    as one compiled function ``begin(V, send, I, F, A, P, R)`` (source text; the loop calls
    its body, ``begin_inline``, at the start of a solve), or None
    where the start-up needs Python (a dot, a coefficient that is a scalar, a word of
    several operators).  Its scalar statements are constants, set by the driver."""
    m = solver.method
    lines = ["", "", "def begin(V, send, I, F, A, P, R):", "    return begin_inline(V, send, I, F, A, P, R)",
             "", "", "@numba.njit(nogil=True, cache=True)", "def begin_inline(V, send, I, F, A, P, R):"]
    lines += [f"    v_{name} = V[{row}]" for name, row in rows.items()]
    for st in m.parsed_startup:
        if st.kind == "apply":
            if len(st.word) != 1:
                return None
            call = "spmv" if st.word == "A" else "precondition"
            lines.append(f"    {call}(v_{st.source}, v_{st.target}, {st.word if st.word == 'A' else 'P'}, R, I, F, False)"
                         f"   # {st.text}")
        elif st.kind == "zero":
            lines.append(f"    v_{st.target}[:] = 0.0")
        elif st.kind == "lincomb":
            if any(c.symbols() for c, _ in st.terms):
                return None
            # as the Python start-up sums them: 0 + c0*v0 + c1*v1 ...
            rhs = "0.0" + "".join(f" + {float(c.terms.get((), 0))!r} * v_{v}[i]" for c, v in st.terms)
            lines += [f"    for i in range(v_{st.target}.shape[0]):   # {st.text}",
                      f"        v_{st.target}[i] = {rhs}"]
        elif st.kind == "dot" or (st.kind == "scalar" and not _constant(st.expression)):
            return None
    for img in solver.start_images:
        src, dst = img.parent.name, img.name
        call, operands = ("spmv", "A") if img.word[0] == "A" else ("precondition", "P")
        lines.append(f"    {call}(v_{src}, v_{dst}, {operands}, R, I, F, False)   # {dst} = {img.word[0]} {src}")
    for j, (a, b) in enumerate(solver.schedule.reductions.pairs[0]):
        lines.append(f"    send[{j}] = dot(v_{a.name}, v_{b.name})")
    lines.append("    return 0")
    return "\n".join(lines) + "\n"
