"""The loop of a derived method: one Python function per schedule, built as a syntax tree
and printed with ``ast.unparse`` (``python -m pipekrylov derive cg --code`` shows it).

The function has the signature of every loop (:mod:`pipekrylov.loops`) and runs on the
runtime: per reduction point it starts the reduction, applies the operators that overlap
it (the SpMV with its halo exchange, the preconditioner) poking it, waits, tests for
convergence at point 0 (a pass is confirmed against ``b - A x``), computes the scalars
with their breakdown checks and calls the segment's fused update (:mod:`.codegen`).  The
start-up, the images at point 0 and the first reduction's dots come first; a failed
confirmation starts again from ``x`` there.  A blocking schedule's phase applies its
operators, takes its dots and waits for their reduction, then goes on as a pipelined one.  Numba compiles it; the interpreter runs the
same function for operators only Python applies.  Its vectors and scalars keep the
method's names; its scalars are kept between calls in ``S`` under named slots.
"""
import ast
import builtins
from dataclasses import dataclass

from ..runtime import layout as L
from .method import evaluate

__all__ = ["generate_loop", "LoopCode"]

_BUILTINS = set(dir(builtins))
# the names the loop function defines itself; a method's vector or scalar of the same
# name is renamed (with a trailing underscore) in the loop
_RESERVED = {"W", "x", "b", "S", "I", "F", "hist", "trace", "A", "P", "R", "send", "d", "np", "event", "iteration",
             "resume", "first", "value", "rnorm", "dot", "start", "wait", "allreduce", "tolerance", "residual_test",
             "confirm", "room", "coef", "out", "true_r", "true_z", "scratch", "apply_operator", "precondition"}


@dataclass
class LoopCode:
    """A derived loop's generated module: ``source`` (printable), its workspace in the
    order the function unpacks it, its scalars in the order of their slots in ``S``, its
    breakdown checks ``(name, condition, reason)`` by number, its reductions' labels."""

    source: str
    workspace: list    # [(name, length)]: length None for a vector of the solve's size
    scalars: list
    checks: list
    labels: list


def _name(identifier, store=False):
    return ast.Name(id=identifier, ctx=ast.Store() if store else ast.Load())


def _const(value):
    return ast.Constant(value=value)


def _call(function, *args, **keywords):
    func = _name(function) if isinstance(function, str) else function
    return ast.Call(func=func, args=list(args), keywords=[ast.keyword(arg=k, value=v) for k, v in keywords.items()])


def _assign(target, value):
    target = _name(target, store=True) if isinstance(target, str) else target
    return ast.Assign(targets=[target], value=value, lineno=0)


def _subscript(array, *index, store=False):
    key = index[0] if len(index) == 1 else ast.Tuple(elts=list(index), ctx=ast.Load())
    return ast.Subscript(value=_name(array), slice=key, ctx=ast.Store() if store else ast.Load())


def _compare(left, op, right):
    return ast.Compare(left=left, ops=[op], comparators=[right])


def _if(test, body, orelse=()):
    return ast.If(test=test, body=list(body), orelse=list(orelse))


def _stmt(expression):
    return ast.Expr(value=expression)


def _ne_none(value):
    return _compare(value, ast.NotEq(), _name("NONE"))


def _break_unless_none(call):
    """``event = call; if event != NONE: break``"""
    return [_assign("event", call), _if(_ne_none(_name("event")), [ast.Break()])]


def _either(*tests):
    return ast.BoolOp(op=ast.Or(), values=list(tests))


def _resume_is(point):
    return _compare(_name("resume"), ast.Eq(), _name(point))


class _Renamer(ast.NodeTransformer):
    def __init__(self, names):
        self.names = names

    def visit_Name(self, node):
        return ast.copy_location(_name(self.names.get(node.id, node.id), isinstance(node.ctx, ast.Store)), node)


def generate_loop(code, function_name):
    """The generated module of ``code`` (a :class:`.codegen.GeneratedCode`) as a
    :class:`LoopCode`."""
    return _Generator(code, function_name).module()


class _Generator:
    def __init__(self, code, function_name):
        self.code, self.function_name = code, function_name
        sched, method = code.schedule, code.method
        self.sched, self.method = sched, method
        self.K = len(code.segments)
        self.natural = method.norm == "natural"
        self.startup = [st for st in method.parsed_startup]
        startup_vectors = [st.target for st in self.startup if st.kind in ("apply", "zero", "lincomb")]
        self.vectors = [v for v in dict.fromkeys(list(code.storage) + startup_vectors + list(method.constants))
                        if v not in ("x", "b")]
        self.rename = {n: n + "_" for n in set(self.vectors) | self._scalar_names() if n in _RESERVED}
        self.kernels = {}     # start-up kernel name -> FusedKernel
        self.checks = []
        self.labels = [f"reduction {k}" for k in range(self.K)] + ["true ||r||", "start-up"]
        self.comments = []

    def comment(self, text):
        """A comment line (``ast`` keeps none): a placeholder statement that :func:`_print`
        turns into ``# text``."""
        self.comments.append(text)
        return _stmt(_name(f"__comment_{len(self.comments) - 1}__"))

    # ------------------------------------------------------------ names
    def _scalar_names(self):
        sched, code = self.sched, self.code
        names = []
        defined = {st.name for ph in sched.phases for st in ph.scalars} | set(sched.carried)
        defined |= {st.target for st in self.method.parsed_startup if st.kind in ("scalar", "dot")}

        def add(name):
            if name not in names:
                names.append(name)
        for st in self.method.parsed_startup:
            if st.kind in ("scalar", "dot"):
                add(st.target)
        for ph in sched.phases:
            for st in ph.scalars:
                add(st.name)
                for n in _names(st.expression, defined):
                    add(n)
        for a, c in sched.carried.items():
            add(a)
            add(c)
        for seg in code.segments:
            for s in seg.scalars:
                add(s)
        for n in _names(sched.reductions.norm, defined):
            add(n)
        self.scalars = names
        return set(names)

    def v(self, name):
        return self.rename.get(name, name)

    def expression(self, text):
        """A scalar expression of the schedule over the loop's names (``d[j]`` stays)."""
        tree = ast.parse(text, mode="eval").body
        return _Renamer({n: self.v(n) for n in self.scalars}).visit(tree)

    # ------------------------------------------------------------ the module
    def module(self):
        slots = self._slots()
        function = self._function()   # before the imports: it makes the start-up's kernels
        tree = ast.Module(body=self._imports() + slots + [function], type_ignores=[])
        ast.fix_missing_locations(tree)
        return LoopCode(source=_print(tree, self.comments), workspace=self.workspace, scalars=self.scalars, checks=self.checks,
                        labels=self.labels)

    def _imports(self):
        layout = sorted({"AFTER_TEST", "BEGIN", "CONFIRM", "CONVERGED", "DONE", "FLUSH", "FROM_X", "HIST", "IMAGES",
                         "ITERATION", "MAXITER", "MAX_ITERATIONS", "NONE", "REPLACEMENTS", "RESUME", "TOP",
                         "STOP_EVERY", "REPLACE_EVERY", "CHECK_EVERY", "ITERATED", "VALUE", "RESTART", "STARTED",
                         "WARM"})
        out = [ast.Import(names=[ast.alias(name="numpy", asname="np")]),
               ast.ImportFrom(module="pipekrylov.kernels", names=[ast.alias(name="dot")], level=0),
               ast.ImportFrom(module="pipekrylov.runtime.layout",
                              names=[ast.alias(name=n) for n in layout], level=0),
               ast.ImportFrom(module="pipekrylov.runtime.operators",
                              names=[ast.alias(name="apply_operator"), ast.alias(name="precondition")], level=0),
               ast.ImportFrom(module="pipekrylov.runtime.reduce",
                              names=[ast.alias(name=n) for n in ("allreduce", "start", "wait")], level=0),
               ast.ImportFrom(module="pipekrylov.runtime.steps",
                              names=[ast.alias(name=n) for n in ("breakdown", "confirm", "residual_test", "room",
                                                                  "tolerance")], level=0)]
        for seg in self.code.segments:
            out.append(ast.ImportFrom(module=seg.kernel.py_func.__module__,
                                      names=[ast.alias(name="fused", asname=f"update_{seg.k}")], level=0))
        for name, kernel in self.kernels.items():
            out.append(ast.ImportFrom(module=kernel.module, names=[ast.alias(name="fused", asname=name)], level=0))
        return out

    def _slots(self):
        taken = set(vars(L))
        names = [self.v(s).upper() + ("_" if self.v(s).upper() in taken else "") for s in self.scalars]
        slots = [_assign(ast.Tuple(elts=[_name(n, True) for n in names], ctx=ast.Store()),
                         _call("range", _const(len(names))))] if len(names) > 1 else \
            [_assign(names[0], _const(0))] if names else []
        self.slot = dict(zip(self.scalars, names))
        return [self.comment(" the scalars kept in S between calls")] + slots

    def _function(self):
        code = self.code
        kind = "blocking" if self.sched.blocking else "pipelined"
        body = [ast.Expr(value=_const(f"The iterations of {kind} {self.method.title}, derived by pipekrylov.derive."))]
        main = self._main_loop()   # first: it makes the start-up's kernels
        self.workspace = [(self.v(n), None) for n in self.vectors] + [("true_r", None), ("true_z", None)] + \
            [(f"coef_{seg.k}", max(1, len(seg.scalars))) for seg in code.segments] + [("scratch", 1)] + \
            [(f"coef_{name}", max(1, len(k.scalars))) for name, k in self.kernels.items()]
        body.append(_assign(ast.Tuple(elts=[_name(n, True) for n, _ in self.workspace], ctx=ast.Store()), _name("W")))
        body += [_assign(self.v(s), _subscript("S", _name(self.slot[s]))) for s in self.scalars]
        body += [_assign("send", ast.Subscript(value=ast.Attribute(value=_name("R"), attr="send", ctx=ast.Load()),
                                               slice=_const(0), ctx=ast.Load())),
                 _assign("d", ast.Subscript(value=ast.Attribute(value=_name("R"), attr="recv", ctx=ast.Load()),
                                            slice=_const(0), ctx=ast.Load())),
                 _assign("iteration", _subscript("I", _name("ITERATION"))),
                 _assign("resume", _subscript("I", _name("RESUME"))),
                 _assign("event", _name("NONE")),
                 main,
                 _assign(_subscript("I", _name("ITERATION"), store=True), _name("iteration")),
                 _assign(_subscript("I", _name("RESUME"), store=True), _name("resume"))]
        body += [_assign(_subscript("S", _name(self.slot[s]), store=True), _name(self.v(s))) for s in self.scalars]
        body.append(ast.Return(value=_name("event")))
        args = ast.arguments(posonlyargs=[], args=[ast.arg(arg=a) for a in
                                                   ("W", "x", "b", "S", "I", "F", "hist", "trace", "A", "P", "R")],
                             kwonlyargs=[], kw_defaults=[], defaults=[])
        return ast.FunctionDef(name=self.function_name, args=args, body=body, decorator_list=[], returns=None,
                               type_params=[], lineno=0)

    # ------------------------------------------------------------ the loop
    def _main_loop(self):
        K = self.K
        body = [_assign("first", _resume_is("BEGIN"))]
        warm = _if(_compare(_subscript("I", _name("WARM")), ast.NotEq(), _const(0)),
                   [self.comment(" a warm start: the driver sets its state over the start-up's"),
                    _assign(_subscript("I", _name("WARM"), store=True), _const(0)),
                    _assign("resume", _name("IMAGES")), _assign("event", _name("STARTED")), ast.Break()])
        body.append(_if(_either(_resume_is("BEGIN"), _resume_is("FROM_X")),
                        [self.comment(" the start-up")] + self._startup() + [warm]))
        images = self._images()
        if images:
            body.append(_if(_either(_resume_is("BEGIN"), _resume_is("FROM_X"), _resume_is("IMAGES")),
                            [self.comment(" the images at point 0" if self.sched.blocking else
                                          " the images at point 0 and the dots of the first reduction")] + images))
        body.append(_if(_resume_is("CONFIRM"),
                        [self.comment(" the driver reported the test, which passed: confirm it against b - A x")] +
                        _break_unless_none(self._confirm()) + self._restart(return_to_driver=True)))
        body.append(_if(_compare(_name("resume"), ast.NotEq(), _name("AFTER_TEST")), self._top()))
        body.append(_assign("resume", _name("TOP")))
        body += self._phase(0)
        for k in range(1, K):
            body += self._reduction(k) + self._phase(k)
        body += [self.comment(" the end of the iteration"),
                 _assign(_subscript("I", _name("DONE"), store=True), ast.BinOp(_name("iteration"), ast.Add(), _const(1))),
                 _if(self._period(), [_assign("event", _name("ITERATED"))]),
                 ast.AugAssign(target=_name("iteration", True), op=ast.Add(), value=_const(1)),
                 _if(_ne_none(_name("event")), [ast.Break()])]
        return ast.While(test=_const(True), body=body, orelse=[])

    def _period(self):
        """An iteration the driver sees: each one with a callback, the replacement's and
        the drift check's periods."""
        def every(field):
            done = ast.BinOp(_name("iteration"), ast.Add(), _const(1))
            return ast.BoolOp(op=ast.And(), values=[
                _compare(_subscript("I", _name(field)), ast.Gt(), _const(0)),
                _compare(ast.BinOp(done, ast.Mod(), _subscript("I", _name(field))), ast.Eq(), _const(0))])
        return _either(_compare(_subscript("I", _name("STOP_EVERY")), ast.NotEq(), _const(0)),
                       every("REPLACE_EVERY"), every("CHECK_EVERY"))

    def _top(self):
        """Reduction 0 with the residual test (and, in a solve's first, (b, b))."""
        pairs0 = len(self.sched.phases[0].pairs)
        out = [_if(ast.UnaryOp(op=ast.Not(), operand=_call("room", _const(1), _const(self.K), _name("hist"),
                                                             _name("trace"), _name("I"))),
                   [_assign("event", _name("FLUSH")), ast.Break()])]
        if self.natural:   # ||b||_M: the natural norm's tolerance
            rhs = [_stmt(_call("precondition", _name("P"), _name("b"), _name("true_z"), _name("R"), _const(-1),
                               _name("I"), _name("F"))),
                   _assign(_subscript("send", _const(pairs0), store=True), _call("dot", _name("b"), _name("true_z")))]
        else:
            rhs = [_assign(_subscript("send", _const(pairs0), store=True), _call("dot", _name("b"), _name("b")))]
        out.append(_if(_name("first"), [self.comment(" the solve's first reduction: ||b|| too")] + rhs))
        count = ast.IfExp(test=_name("first"), body=_const(pairs0 + 1), orelse=_const(pairs0))
        out += self._reduction(0, count)
        out.append(_if(_name("first"), _break_unless_none(
            _call("tolerance", _subscript("d", _const(pairs0)), _name("I"), _name("F")))))
        out += [_assign("value", self.expression(self.sched.reductions.norm)),
                _assign("rnorm", _call(ast.Attribute(value=_name("np"), attr="sqrt", ctx=ast.Load()),
                                       ast.IfExp(test=_compare(_const(0.0), ast.Gt(), _name("value")),
                                                 body=_const(0.0), orelse=_name("value")))),
                _assign("event", _call("residual_test", _name("rnorm"), _name("hist"), _name("I"), _name("F"))),
                _if(_compare(_name("event"), ast.Eq(), _name("CONVERGED")),
                    [self.comment(" the recurrences may have drifted from b - A x: confirm it")] +
                    _break_unless_none(self._confirm()) +
                    [_assign(_subscript("hist", ast.BinOp(_subscript("I", _name("HIST")), ast.Sub(), _const(1)),
                                        store=True), _subscript("F", _name("VALUE")))] +
                    self._restart(return_to_driver=False)),
                _if(_ne_none(_name("event")), [ast.Break()]),
                _if(_compare(_name("iteration"), ast.Eq(), _subscript("I", _name("MAXITER"))),
                    [_assign("event", _name("MAX_ITERATIONS")), ast.Break()])]
        return out

    def _confirm(self):
        return _call("confirm", _name("A"), _name("P"), _name("x"), _name("b"), _name("true_r"), _name("true_z"),
                     _const(self.natural), _name("R"), _const(0), _const(self.K), _name("I"), _name("F"),
                     _name("trace"))

    def _restart(self, return_to_driver):
        """b - A x failed the test: start again from x (the count goes on)."""
        out = [ast.AugAssign(target=_subscript("I", _name("REPLACEMENTS"), store=True), op=ast.Add(), value=_const(1)),
               ast.AugAssign(target=_name("iteration", True), op=ast.Add(), value=_const(1)),
               _if(_compare(_name("iteration"), ast.Gt(), _subscript("I", _name("MAXITER"))),
                   [_assign("event", _name("MAX_ITERATIONS")), ast.Break()]),
               _assign("resume", _name("FROM_X"))]
        if return_to_driver:   # it records the true norm in its history
            return out + [_assign("event", _name("RESTART")), ast.Break()]
        return out + [ast.Continue()]

    def _reduction(self, k, count=None):
        ph = self.sched.phases[k]
        if self.sched.blocking:
            return self._blocking_reduction(k, count)
        out = [self.comment(f" reduction {k}: " + ", ".join(f"({a.name}, {b.name})" for a, b in ph.pairs)),
               _stmt(_call("start", _name("R"), _const(0), count or _const(len(ph.pairs)), _const(k), _name("I"),
                           _name("F"), _name("trace")))]
        out += [self._apply(img, 0) for img in ph.overlap]
        out += _break_unless_none(_call("wait", _name("R"), _const(0), _name("I"), _name("F"), _name("trace")))
        return out

    def _blocking_reduction(self, k, count=None):
        ph = self.sched.phases[k]
        out = [self._apply(img, -1) for img in ph.overlap]
        out.append(self.comment(f" reduction {k}: " + ", ".join(f"({a.name}, {b.name})" for a, b in ph.pairs)))
        out += self._dots(ph.pairs)
        return out + _break_unless_none(_call("allreduce", _name("R"), _const(0), count or _const(len(ph.pairs)),
                                              _const(k), _name("I"), _name("F"), _name("trace")))

    def _apply(self, img, slot):
        """An image's operator applied to its parent (poking reduction ``slot``; -1: none)."""
        op, operands = ("apply_operator", "A") if img.word[0] == "A" else ("precondition", "P")
        return _stmt(_call(op, _name(operands), _name(self.v(img.parent.name)), _name(self.v(img.name)),
                           _name("R"), _const(slot), _name("I"), _name("F")))

    def _dots(self, pairs):
        return [_assign(_subscript("send", _const(j), store=True), _call("dot", _name(self.v(a.name)), _name(self.v(c.name))))
                for j, (a, c) in enumerate(pairs)]

    def _phase(self, k):
        ph, seg = self.sched.phases[k], self.code.segments[k]
        out = []
        for st in ph.scalars:
            out.append(_assign(self.v(st.name), self.expression(st.expression)))
            if st.name in ph.checks:
                condition, reason = ph.checks[st.name]
                out.append(_if(ast.UnaryOp(op=ast.Not(), operand=self.expression(condition)),
                               [_assign("event", _call("breakdown", _const(len(self.checks)), _name(self.v(st.name)),
                                                       _name("I"), _name("F"))), ast.Break()]))
                self.checks.append((st.name, condition, reason))
        if k == self.K - 1:
            out += [_assign(self.v(a), _name(self.v(c))) for a, c in self.sched.carried.items()]
        coef = f"coef_{k}"
        out += [_assign(_subscript(coef, _const(j), store=True), _name(self.v(s))) for j, s in enumerate(seg.scalars)]
        out.append(self.comment(f" fused update {k}" if self.sched.blocking else
                                f" fused update {k}, with the local dots of reduction {(k + 1) % self.K}"))
        out.append(_stmt(_call(f"update_{k}", *[_name(self.v(a)) for a in seg.arrays], _name(coef), _name("send"))))
        return out

    # ------------------------------------------------------------ the start-up
    def _startup(self):
        """The method's start-up statements, as the base method writes them."""
        from ..kernels import fused_kernel
        out = []
        for st in self.startup:
            out.append(self.comment(f" {st.text}"))
            if st.kind == "apply":
                out += self._apply_word(st.word, st.source, st.target)
            elif st.kind in ("zero", "lincomb"):
                text = f"{st.target} = 0" if st.kind == "zero" else st.text
                scalars = st.scalars_read() if st.kind == "lincomb" else []
                kernel = fused_kernel([text], scalars=scalars, exact=True)
                name = f"start_{len(self.kernels)}"
                self.kernels[name] = kernel
                coef = f"coef_{name}"
                out += [_assign(_subscript(coef, _const(j), store=True), _name(self.v(s))) for j, s in enumerate(scalars)]
                out.append(_stmt(_call(name, *[_name(self.v(vv)) for vv in kernel.vectors], _name(coef),
                                       _name("scratch"))))
            elif st.kind == "dot":
                u, w = st.pair
                out += [_assign(_subscript("send", _const(0), store=True), _call("dot", _name(self.v(u)), _name(self.v(w))))]
                out += _break_unless_none(_call("allreduce", _name("R"), _const(0), _const(1), _const(self.K + 1),
                                                _name("I"), _name("F"), _name("trace")))
                out.append(_assign(self.v(st.target), _subscript("d", _const(0))))
            else:
                out.append(_assign(self.v(st.target), self._scalar_value(st.expression)))
        return out

    def _scalar_value(self, expression):
        """A start-up scalar: a constant where it is one (``float('inf')`` -> ``np.inf``),
        else the expression over the loop's names."""
        try:
            value = float(evaluate(expression, {}))
        except NameError:
            return self.expression(expression)
        if value != value:
            return ast.Attribute(value=_name("np"), attr="nan", ctx=ast.Load())
        if value in (float("inf"), float("-inf")):
            inf = ast.Attribute(value=_name("np"), attr="inf", ctx=ast.Load())
            return inf if value > 0 else ast.UnaryOp(op=ast.USub(), operand=inf)
        return _const(value)

    def _apply_word(self, word, source, target):
        """``target = word source`` (operators outermost first), through the scratch
        vector for a word of several."""
        out, value = [], self.v(source)
        for j, op in enumerate(reversed(word)):
            last = j == len(word) - 1
            into = self.v(target) if last else ("true_r" if j % 2 == 0 else "true_z")
            call, operands = ("apply_operator", "A") if op == "A" else ("precondition", "P")
            out.append(_stmt(_call(call, _name(operands), _name(value), _name(into), _name("R"), _const(-1),
                                   _name("I"), _name("F"))))
            value = into
        return out

    def _images(self):
        out = [self._apply(img, -1) for img in self.code.start_images]
        if self.sched.blocking:   # its phases take their own dots
            return out
        return out + self._dots(self.sched.reductions.pairs[0])


def _names(expression, scalars=()):
    """The scalars an expression names (not ``d``, not builtins unless a scalar has the name)."""
    return [n.id for n in ast.walk(ast.parse(expression, mode="eval")) if isinstance(n, ast.Name)
            and n.id != "d" and (n.id not in _BUILTINS or n.id in scalars)]


def _print(tree, comments):
    """The module's source: ``ast.unparse``, with the comments in place of their
    placeholders."""
    lines = []
    for line in ast.unparse(tree).splitlines():
        stripped = line.lstrip()
        if stripped.startswith("__comment_") and stripped.endswith("__"):
            line = line[:len(line) - len(stripped)] + "#" + comments[int(stripped[10:-2])]
        lines.append(line)
    return "\n".join(lines) + "\n"
