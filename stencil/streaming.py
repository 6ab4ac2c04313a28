"""Row updates with non-temporal (streaming) stores, for sweeps of grids far larger than the cache.

A plain store first reads the cache line it writes (write-allocate), so a sweep moves
24 B per update; a non-temporal store writes the line without reading it: 16 B.  Numba's
loop vectorizer never emits one (LLVM widens a store marked ``!nontemporal`` only when it
is aligned to the vector, which a scalar store of Python source is not), so this row loop
is written as LLVM IR through :func:`numba.extending.intrinsic`:

* vectors of 8 doubles, one 64-byte cache line, stored aligned after a scalar peel: a
  streaming store that fills a whole line at once.  With 4-double vectors (two stores per
  line) the streaming sweep ran at 0.81x the plain one here, with 8 at 1.18x;
* the centre row is loaded once per vector and its left and right neighbours are shuffled
  out of consecutive centre vectors (unaligned 64-byte loads would split cache lines);
* the same additions in the same order as :mod:`stencil.kernels`, so results stay bit for
  bit those of the reference;
* streaming stores are weakly ordered: :func:`store_fence` (an ``mfence``) must follow
  them before another thread reads the grid.
"""
import functools

from llvmlite import ir
from numba.core import cgutils, types
from numba.core.errors import TypingError
from numba.extending import intrinsic

__all__ = ["streaming_row", "store_fence"]

LANES = 8          # doubles per vector: one cache line
UNROLL = 4         # vectors per iteration of the main loop


@functools.lru_cache(maxsize=None)
def streaming_row(ndim, variable):
    """The intrinsic ``row(w, c, a, rows, c0, c1)`` for this stencil form.

    Writes ``w[i]`` for ``1 <= i < len(w) - 1`` from the centre row ``c`` (its
    ``c[i - 1]``, ``c[i + 1]``), the neighbour rows in the tuple ``rows`` (``2*ndim - 2``
    of them, in the order of the neighbour sum) and, when ``variable``, the coefficient
    row ``a`` (ignored otherwise); every array 1D, contiguous, as long as ``w``.
    """
    nrows = 2 * ndim - 2

    @intrinsic
    def row(typingctx, w, c, a, rows, c0, c1):
        arrays = (w, c, a) + tuple(getattr(rows, "types", ()))
        if (len(arrays) != 3 + nrows or any(not isinstance(x, types.Array) or x.dtype != types.float64
                                            or x.ndim != 1 or x.layout != "C" for x in arrays)
                or not (isinstance(c0, types.Float) and isinstance(c1, types.Float))):
            raise TypingError(f"row needs 1D contiguous float64 rows, a tuple of {nrows} and two "
                              f"floats: got {arrays}, {c0}, {c1}")
        sig = types.void(w, c, a, rows, c0, c1)

        def codegen(context, builder, signature, args):
            def data(array_type, value):
                return context.make_array(array_type)(context, builder, value)
            output = data(signature.args[0], args[0])
            length = builder.extract_value(output.shape, 0)
            centre, coefficient = (data(t, v).data for t, v in zip(signature.args[1:3], args[1:3]))
            neighbours = [data(t, v).data for t, v in
                          zip(signature.args[3].types, cgutils.unpack_tuple(builder, args[3], nrows))]
            _RowLoop(builder, [output.data, centre, coefficient], neighbours, args[4], args[5], ndim,
                     variable).emit(length)
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


class _RowLoop:
    """The IR of one row: scalar peel up to a cache-line boundary of ``w``, unrolled vector
    loop, single-vector loop, scalar tail."""

    def __init__(self, builder, arrays, neighbours, c0, c1, ndim, variable):
        self.b = builder
        self.w, self.c, self.a = arrays
        self.neighbours, self.variable = neighbours, variable
        self.i64, self.i32 = ir.IntType(64), ir.IntType(32)
        self.vec = ir.VectorType(ir.DoubleType(), LANES)
        # the stencil's constants, as scalars and broadcast once (in the entry block)
        twice_ndim = ir.Constant(ir.DoubleType(), float(2 * ndim))
        self.constants = {False: (c0, c1, twice_ndim),
                          True: tuple(self.splat(x) for x in (c0, c1, twice_ndim))}

    def const(self, value):
        return ir.Constant(self.i64, value)

    def splat(self, x):
        v = ir.Constant(self.vec, ir.Undefined)
        for lane in range(LANES):
            v = self.b.insert_element(v, x, ir.Constant(self.i32, lane))
        return v

    def load(self, ptr, i, vector=False):
        address = self.b.gep(ptr, [i])
        if vector:
            address = self.b.bitcast(address, self.vec.as_pointer())
        return self.b.load(address, align=8)

    def update(self, centre, left, right, i, vector):
        """The stencil of :func:`stencil.kernels._update`, additions in its order."""
        b = self.b
        total = b.fadd(left, right)
        for row in self.neighbours:
            total = b.fadd(total, self.load(row, i, vector))
        c0, c1, twice_ndim = self.constants[vector]
        if self.variable:
            return b.fadd(centre, b.fmul(self.load(self.a, i, vector), b.fsub(total, b.fmul(twice_ndim, centre))))
        return b.fadd(b.fmul(c0, centre), b.fmul(c1, total))

    def scalar_loop(self, start, stop):
        b = self.b
        before = b.block
        head, body, after = (b.append_basic_block(name) for name in ("scalar", "scalar.body", "scalar.end"))
        b.branch(head)
        b.position_at_end(head)
        i = b.phi(self.i64)
        b.cbranch(b.icmp_signed("<", i, stop), body, after)
        b.position_at_end(body)
        value = self.update(self.load(self.c, i), self.load(self.c, b.sub(i, self.const(1))),
                            self.load(self.c, b.add(i, self.const(1))), i, False)
        b.store(value, b.gep(self.w, [i]), align=8)
        i.add_incoming(start, before)
        i.add_incoming(b.add(i, self.const(1)), b.block)
        b.branch(head)
        b.position_at_end(after)

    def vector_loop(self, state, stop, unroll):
        """Vectors while ``i + (unroll + 1) * LANES <= stop`` (the next centre vector is
        loaded ahead); ``state`` = (i, previous centre vector, centre vector)."""
        b = self.b
        before = b.block
        head, body, after = (b.append_basic_block(name) for name in ("vector", "vector.body", "vector.end"))
        b.branch(head)
        b.position_at_end(head)
        phis = [b.phi(self.i64), b.phi(self.vec), b.phi(self.vec)]
        for phi, value in zip(phis, state):
            phi.add_incoming(value, before)
        i, previous, centre = phis
        b.cbranch(b.icmp_signed("<=", b.add(i, self.const((unroll + 1) * LANES)), stop), body, after)
        b.position_at_end(body)
        shift_left = ir.Constant(ir.VectorType(self.i32, LANES), [LANES - 1 + k for k in range(LANES)])
        shift_right = ir.Constant(ir.VectorType(self.i32, LANES), [1 + k for k in range(LANES)])
        nontemporal = b.module.add_metadata([ir.Constant(self.i32, 1)])
        for _ in range(unroll):
            following = self.load(self.c, b.add(i, self.const(LANES)), True)
            value = self.update(centre, b.shuffle_vector(previous, centre, shift_left),
                                b.shuffle_vector(centre, following, shift_right), i, True)
            store = b.store(value, b.bitcast(b.gep(self.w, [i]), self.vec.as_pointer()), align=8 * LANES)
            store.set_metadata("nontemporal", nontemporal)
            i, previous, centre = b.add(i, self.const(LANES)), centre, following
        for phi, value in zip(phis, (i, previous, centre)):
            phi.add_incoming(value, b.block)
        b.branch(head)
        b.position_at_end(after)
        return phis

    def emit(self, length):
        b = self.b
        one, last = self.const(1), b.sub(length, self.const(1))
        # First i >= 1 with w + i on a cache-line boundary; a w not even 8-byte aligned
        # (a view into a byte buffer) gets no vectors at all.
        address = b.ptrtoint(self.w, self.i64)
        to_boundary = b.and_(b.sub(self.const(0), b.add(address, self.const(8))), self.const(8 * LANES - 1))
        start = b.add(one, b.lshr(to_boundary, self.const(3)))
        misaligned = b.icmp_unsigned("!=", b.and_(address, self.const(7)), self.const(0))
        start = b.select(b.or_(misaligned, b.icmp_signed(">", start, last)), last, start)
        self.scalar_loop(one, start)
        # Vectors only when two centre vectors fit: the loop loads one ahead.
        enough = b.icmp_signed("<=", b.add(start, self.const(2 * LANES)), length)
        before = b.block
        with b.if_then(enough):
            first = b.insert_element(ir.Constant(self.vec, ir.Undefined),
                                     self.load(self.c, b.sub(start, one)), ir.Constant(self.i32, LANES - 1))
            state = (start, first, self.load(self.c, start, True))
            for unroll in (UNROLL, 1):
                state = self.vector_loop(state, length, unroll)
            vectors_end, vectors_block = state[0], b.block
        tail = b.phi(self.i64)
        tail.add_incoming(start, before)
        tail.add_incoming(vectors_end, vectors_block)
        self.scalar_loop(tail, last)
