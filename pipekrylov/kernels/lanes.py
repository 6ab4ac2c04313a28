"""The eight interleaved partial sums of the package's dot products, in one vector register.

A dot product here is eight sums, ``s_k = sum_q a[8q + k] b[8q + k]`` in order of q,
added at the end in a fixed order (:func:`pipekrylov.kernels.fused.dot`): IEEE
arithmetic, the same bits wherever the code is compiled.  Written as eight scalar
accumulators, LLVM (Numba's, without fast-math) keeps them scalar: one multiply and one
add per entry.  The eight sums are the eight lanes of one vector, and these functions say
so in LLVM IR: a vector multiply and a vector add per eight entries, each lane's
operations those of its scalar sum (no fused multiply-add: each product rounded, then
added), so the bits are unchanged and the dot is about twice as fast from 4,096 entries
up (Intel Xeon, AVX-512; a CPU with narrower vectors splits the eight lanes).

:func:`lane_sums` gives the eight sums of ``a . b`` over the whole blocks of eight,
:func:`lane_sums_pair` those of ``a . b`` and ``c . b`` reading b once,
:func:`lane_sums_grid` those of four products of two rows and two vectors, each read
once; the caller adds the tail, then :func:`lanes_total` adds the lanes.  The arrays must
be C-contiguous float64 vectors; the last one's length decides the blocks (the others at
least as long).
"""
import numba
from llvmlite import ir
from numba import types
from numba.core import errors
from numba.extending import intrinsic

__all__ = ["LANES", "lane_sums", "lane_sums_pair", "lane_sums_grid", "lanes_total"]

LANES = 8


@numba.njit(cache=True, nogil=True, inline="always")
def lanes_total(s0, s1, s2, s3, s4, s5, s6, s7):
    """The dot product from its eight sums, added in the one fixed order."""
    return ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7))


@intrinsic
def lane_sums(typingctx, a, b):
    """The eight partial sums of ``a . b`` over b's whole blocks of eight entries."""
    return _intrinsic((a, b), [(0, 1)])


@intrinsic
def lane_sums_pair(typingctx, a, c, b):
    """The eight partial sums of ``a . b``, then those of ``c . b``, b read once."""
    return _intrinsic((a, c, b), [(0, 2), (1, 2)])


@intrinsic
def lane_sums_grid(typingctx, a, c, u, w):
    """The eight partial sums of ``a . u``, then of ``a . w``, ``c . u``, ``c . w``, each
    vector read once."""
    return _intrinsic((a, c, u, w), [(0, 2), (0, 3), (1, 2), (1, 3)])


def _intrinsic(operands, products):
    """The signature and code of the lane sums of ``products`` (pairs of operand
    indices) over the last operand's whole blocks of eight entries."""
    for t in operands:
        if not (isinstance(t, types.Array) and t.ndim == 1 and t.layout == "C" and t.dtype == types.float64):
            raise errors.TypingError(f"lane sums need C-contiguous float64 vectors, got {t}")
    result = types.UniTuple(types.float64, len(products) * LANES)

    def codegen(context, builder, signature, args):
        return context.make_tuple(builder, result, _sums(context, builder, signature.args, args, products))
    return result(*operands), codegen


def _sums(context, builder, array_types, arrays, products):
    """IR of the loop over the blocks: one vector accumulator per product (x, y),
    ``acc += x[block] * y[block]``; the accumulators' lanes, in order."""
    i64, i32 = ir.IntType(64), ir.IntType(32)
    vector = ir.VectorType(ir.DoubleType(), LANES)
    operands = [context.make_array(t)(context, builder, value) for t, value in zip(array_types, arrays)]
    data = [operand.data for operand in operands]
    blocks = builder.sdiv(builder.extract_value(operands[-1].shape, 0), ir.Constant(i64, LANES))

    before = builder.basic_block
    test = builder.append_basic_block("lanes.test")
    body = builder.append_basic_block("lanes.body")
    done = builder.append_basic_block("lanes.done")
    builder.branch(test)
    builder.position_at_end(test)
    q = builder.phi(i64)
    sums = [builder.phi(vector) for _ in products]
    q.add_incoming(ir.Constant(i64, 0), before)
    for s in sums:
        s.add_incoming(ir.Constant(vector, [0.0] * LANES), before)
    builder.cbranch(builder.icmp_signed("<", q, blocks), body, done)

    builder.position_at_end(body)
    offset = builder.mul(q, ir.Constant(i64, LANES))
    # each operand's entries offset .. offset + 7, loaded once, aligned as a double is
    block = [builder.load(builder.bitcast(builder.gep(d, [offset]), vector.as_pointer()), align=8) for d in data]
    for s, (x, y) in zip(sums, products):
        s.add_incoming(builder.fadd(s, builder.fmul(block[x], block[y])), body)
    q.add_incoming(builder.add(q, ir.Constant(i64, 1)), body)
    builder.branch(test)

    builder.position_at_end(done)
    return [builder.extract_element(s, ir.Constant(i32, k)) for s in sums for k in range(LANES)]
