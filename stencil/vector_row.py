"""The row update of every kernel: explicit vectors, several layers per loop, as LLVM IR.

Numba's loop vectorizer gives 4-double vectors with seven loads each, two of them
unaligned.  This row loop, written as LLVM IR through :func:`numba.extending.intrinsic`,
updates the same row of ``layers`` consecutive layers in one pass: 8-double vectors
aligned to the output's cache lines (masked at the ends), each centre row loaded once and
its neighbours shuffled out of it, the layers sharing their rows along axis 0, the
additions in the reference's order (results bit for bit).  With ``nontemporal=True`` the
stores are streaming stores, weakly ordered: :func:`store_fence` must follow them before
another thread reads the grid.  Why each choice, and what it gained: docs/stencil.md
("The vector row").
"""
import functools

from llvmlite import ir
from numba.core import cgutils, types
from numba.core.errors import TypingError
from numba.extending import intrinsic

__all__ = ["vector_row", "store_fence", "LAYERS"]

LANES = 8          # doubles per vector: one cache line
UNROLL = 2         # vectors per layer in one iteration of the main loop
LAYERS = 4         # layers per pass that the kernels use (1 for the remainder)


@functools.lru_cache(maxsize=None)
def vector_row(ndim, variable, periodic=False, layers=1, nontemporal=False):
    """The intrinsic ``row(w, c, a, sides, c0, c1)`` updating one row of ``layers`` layers.

    ``w``: the ``layers`` output rows; ``c``: the ``layers + 2`` rows of that row's column
    along axis 0, from the layer below the first to the layer above the last; ``a``: the
    coefficient rows of the layers when ``variable`` (any ``layers`` rows otherwise,
    unused); ``sides``: in 3D, the rows before and after along axis 1 of each layer in
    turn (``2 * layers``), in 2D an empty tuple.  Every row is a 1D contiguous float64
    array of one length ``nx``.  Writes ``w[r][i]`` for ``1 <= i < nx - 1``, and when
    ``periodic`` also ``i = 0`` and ``nx - 1`` with the wrapped neighbours.
    """
    nsides = 2 * layers if ndim == 3 else 0

    @intrinsic
    def row(typingctx, w, c, a, sides, c0, c1):
        groups = [(w, layers), (c, layers + 2), (a, layers), (sides, nsides)]
        rows = [x for group, count in groups for x in getattr(group, "types", ())]
        if (any(len(getattr(group, "types", ())) != count for group, count in groups)
                or any(not isinstance(x, types.Array) or x.dtype != types.float64
                       or x.ndim != 1 or x.layout != "C" for x in rows)
                or not (isinstance(c0, types.Float) and isinstance(c1, types.Float))):
            raise TypingError(f"row needs tuples of {layers}, {layers + 2}, {layers} and {nsides} 1D "
                              f"contiguous float64 rows and two floats: got {w}, {c}, {a}, {sides}, {c0}, {c1}")
        sig = types.void(w, c, a, sides, c0, c1)

        def codegen(context, builder, signature, args):
            arrays = [[context.make_array(t)(context, builder, v) for t, v in
                       zip(signature.args[n].types, cgutils.unpack_tuple(builder, args[n], count))]
                      for n, (_, count) in enumerate(groups)]
            length = builder.extract_value(arrays[0][0].shape, 0)
            data = [[x.data for x in group] for group in arrays]
            _Rows(builder, *data, args[4], args[5], ndim, variable, nontemporal).emit(length, periodic)
            return context.get_dummy_value()
        return sig, codegen
    return row


@intrinsic
def store_fence(typingctx):
    """A full memory fence: streaming stores before it are visible to every thread after it."""
    def codegen(context, builder, signature, args):
        builder.fence("seq_cst")
        return context.get_dummy_value()
    return types.void(), codegen


class _Rows:
    """The IR of one row of several layers: masked peel up to a cache-line boundary of the
    first output row, unrolled vector loop, single-vector loop, masked tail, and the
    wrapped end points when periodic."""

    def __init__(self, builder, w, c, a, sides, c0, c1, ndim, variable, nontemporal):
        self.b = builder
        self.w, self.c, self.a, self.sides = w, c, a, sides
        self.layers = len(w)
        self.variable, self.nontemporal = variable, nontemporal
        self.i64, self.i32 = ir.IntType(64), ir.IntType(32)
        self.vec = ir.VectorType(ir.DoubleType(), LANES)
        # the stencil's constants, as scalars and broadcast once (in the entry block)
        twice_ndim = ir.Constant(ir.DoubleType(), float(2 * ndim))
        self.constants = {False: (c0, c1, twice_ndim),
                          True: tuple(self.splat(x) for x in (c0, c1, twice_ndim))}

    def const(self, value):
        return ir.Constant(self.i64, value)

    def splat(self, x, vector_type=None):
        v = ir.Constant(vector_type or self.vec, ir.Undefined)
        for lane in range(LANES):
            v = self.b.insert_element(v, x, ir.Constant(self.i32, lane))
        return v

    def load(self, ptr, i, vector=False, mask=None):
        """``ptr[i]``, or the vector from there; only the lanes of ``mask`` when given."""
        address = self.b.gep(ptr, [i])
        if not vector:
            return self.b.load(address, align=8)
        address = self.b.bitcast(address, self.vec.as_pointer())
        if mask is None:
            return self.b.load(address, align=8)
        return self.b.call(self.masked("load"), [address, ir.Constant(self.i32, 1), mask, ir.Constant(self.vec, None)])

    def masked(self, kind):
        """LLVM's masked vector load or store (lanes outside the mask are not touched)."""
        mask = ir.VectorType(ir.IntType(1), LANES)
        arguments = ([self.vec.as_pointer(), self.i32, mask, self.vec] if kind == "load"
                     else [self.vec, self.vec.as_pointer(), self.i32, mask])
        result = self.vec if kind == "load" else ir.VoidType()
        return cgutils.get_or_insert_function(self.b.module, ir.FunctionType(result, arguments),
                                              f"llvm.masked.{kind}.v{LANES}f64.p0v{LANES}f64")

    def update(self, r, left, right, column, i, vector, mask=None):
        """Layer ``r``'s stencil of :func:`stencil.kernels._update`, additions in its order;
        ``column``: the values at ``i`` of the rows ``c`` (loaded once for all layers)."""
        b = self.b
        centre = column[r + 1]
        total = b.fadd(left, right)
        for side in self.sides[2 * r:2 * r + 2]:
            total = b.fadd(total, self.load(side, i, vector, mask))
        total = b.fadd(b.fadd(total, column[r]), column[r + 2])
        c0, c1, twice_ndim = self.constants[vector]
        if self.variable:
            coefficient = self.load(self.a[r], i, vector, mask)
            return b.fadd(centre, b.fmul(coefficient, b.fsub(total, b.fmul(twice_ndim, centre))))
        return b.fadd(b.fmul(c0, centre), b.fmul(c1, total))

    def point(self, i, left, right, mask=None):
        """Every layer at index ``i``, its left and right neighbours at ``left``, ``right``;
        with ``mask``, the vector from ``i`` on, only its lanes in the mask (unaligned
        masked loads and stores, each lane as a vector loop's would be)."""
        b, vector = self.b, mask is not None
        column = [self.load(c, i, vector, mask) for c in self.c]
        for r in range(self.layers):
            centre_row = self.c[r + 1]
            left_value, right_value = (self.load(centre_row, j, vector, mask) for j in (left, right))
            value = self.update(r, left_value, right_value, column, i, vector, mask)
            address = b.gep(self.w[r], [i])
            if vector:
                address = b.bitcast(address, self.vec.as_pointer())
                b.call(self.masked("store"), [value, address, ir.Constant(self.i32, 1), mask])
            else:
                b.store(value, address, align=8)

    def store(self, r, value, i):
        b = self.b
        address = b.bitcast(b.gep(self.w[r], [i]), self.vec.as_pointer())
        if not self.nontemporal:
            b.store(value, address, align=8)
            return
        with b.if_else(self.aligned[r]) as (aligned, otherwise):
            with aligned:
                store = b.store(value, address, align=8 * LANES)
                store.set_metadata("nontemporal", b.module.add_metadata([ir.Constant(self.i32, 1)]))
            with otherwise:
                b.store(value, address, align=8)

    def masked_loop(self, start, stop):
        """Vectors from ``start`` on, of the lanes below ``stop`` (the peel and the tail)."""
        b = self.b
        before = b.block
        head, body, after = (b.append_basic_block(name) for name in ("masked", "masked.body", "masked.end"))
        b.branch(head)
        b.position_at_end(head)
        i = b.phi(self.i64)
        b.cbranch(b.icmp_signed("<", i, stop), body, after)
        b.position_at_end(body)
        lanes = ir.VectorType(self.i64, LANES)
        mask = b.icmp_signed("<", b.add(self.splat(i, lanes), ir.Constant(lanes, list(range(LANES)))),
                             self.splat(stop, lanes))
        self.point(i, b.sub(i, self.const(1)), b.add(i, self.const(1)), mask)
        i.add_incoming(start, before)
        i.add_incoming(b.add(i, self.const(LANES)), b.block)
        b.branch(head)
        b.position_at_end(after)

    def vector_loop(self, state, stop, unroll):
        """Vectors while ``i + (unroll + 1) * LANES <= stop`` (the next centre vectors are
        loaded ahead); ``state`` = i, then per layer its previous and current centre vector."""
        b = self.b
        before = b.block
        head, body, after = (b.append_basic_block(name) for name in ("vector", "vector.body", "vector.end"))
        b.branch(head)
        b.position_at_end(head)
        phis = [b.phi(self.i64)] + [b.phi(self.vec) for _ in range(2 * self.layers)]
        for phi, value in zip(phis, state):
            phi.add_incoming(value, before)
        i, previous, centre = phis[0], phis[1::2], phis[2::2]
        b.cbranch(b.icmp_signed("<=", b.add(i, self.const((unroll + 1) * LANES)), stop), body, after)
        b.position_at_end(body)
        shift_left = ir.Constant(ir.VectorType(self.i32, LANES), [LANES - 1 + k for k in range(LANES)])
        shift_right = ir.Constant(ir.VectorType(self.i32, LANES), [1 + k for k in range(LANES)])
        for _ in range(unroll):
            ahead = b.add(i, self.const(LANES))
            following = [self.load(c, ahead, True) for c in self.c[1:-1]]
            column = [self.load(self.c[0], i, True)] + centre + [self.load(self.c[-1], i, True)]
            for r in range(self.layers):
                value = self.update(r, b.shuffle_vector(previous[r], centre[r], shift_left),
                                    b.shuffle_vector(centre[r], following[r], shift_right), column, i, True)
                self.store(r, value, i)
            i, previous, centre = ahead, centre, following
        for phi, value in zip(phis, [i] + [x for pair in zip(previous, centre) for x in pair]):
            phi.add_incoming(value, b.block)
        b.branch(head)
        b.position_at_end(after)
        return phis

    def emit(self, length, periodic):
        b = self.b
        one, last = self.const(1), b.sub(length, self.const(1))
        # First i >= 1 with w[0] + i on a cache-line boundary; a row not even 8-byte
        # aligned (a view into a byte buffer) is all masked vectors.
        address = b.ptrtoint(self.w[0], self.i64)
        if self.nontemporal:        # which layers' rows share the first one's line alignment
            self.aligned = [b.icmp_unsigned("==", b.and_(b.sub(b.ptrtoint(w, self.i64), address),
                                                         self.const(8 * LANES - 1)), self.const(0))
                            for w in self.w]
        to_boundary = b.and_(b.sub(self.const(0), b.add(address, self.const(8))), self.const(8 * LANES - 1))
        start = b.add(one, b.lshr(to_boundary, self.const(3)))
        misaligned = b.icmp_unsigned("!=", b.and_(address, self.const(7)), self.const(0))
        start = b.select(b.or_(misaligned, b.icmp_signed(">", start, last)), last, start)
        self.masked_loop(one, start)
        # Vectors only when two centre vectors fit: the loop loads one ahead.
        enough = b.icmp_signed("<=", b.add(start, self.const(2 * LANES)), length)
        before = b.block
        with b.if_then(enough):
            state = [start]
            for c in self.c[1:-1]:
                first = b.insert_element(ir.Constant(self.vec, ir.Undefined), self.load(c, b.sub(start, one)),
                                         ir.Constant(self.i32, LANES - 1))
                state += [first, self.load(c, start, True)]
            for unroll in (UNROLL, 1):
                state = self.vector_loop(state, length, unroll)
            vectors_end, vectors_block = state[0], b.block
        tail = b.phi(self.i64)
        tail.add_incoming(start, before)
        tail.add_incoming(vectors_end, vectors_block)
        self.masked_loop(tail, last)
        if periodic:
            self.point(self.const(0), last, one)
            self.point(last, b.sub(last, one), self.const(0))
