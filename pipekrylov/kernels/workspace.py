"""Work vectors laid out for the fused kernels: ``vectors(count, n)``.

A fused kernel streams many vectors at once (pipelined CG with one reduction per two
iterations: 20).  Allocated one by one, vectors of the same length start at the same
address modulo the 4 KiB page (large ones are page-aligned by the allocator, small ones
follow each other at a size that is often a multiple of 4 KiB): a load from one vector
then looks to the CPU like a load from the address a store to another has just written
("4K aliasing"), and waits for it.  Measured on an AMD EPYC Zen 3, n = 16,384 (20
vectors, 18 updates): 247 us a call allocated one by one, 66 us staggered.  So the
vectors are cut from one zeroed buffer, each starting ``4096 / count`` bytes (a whole
number of cache lines, at least one) further into the page than the last.
"""
import numpy as np

__all__ = ["vectors", "arrays"]

PAGE, LINE = 4096, 64


def vectors(count, n):
    """``count`` zeroed, C-contiguous float64 vectors of length ``n``, cut from one buffer,
    their starts 64-byte aligned and spread over the page (distinct modulo 4 KiB for up
    to 64 vectors)."""
    spacing = max(LINE, PAGE // max(count, 1) // LINE * LINE)        # bytes, modulo the page
    stride = n + ((spacing - n * 8) % PAGE) // 8                      # doubles from one start to the next
    buffer = np.zeros(count * stride + LINE // 8)
    first = (-buffer.ctypes.data % LINE) // 8                         # the first start, 64-byte aligned
    return [buffer[first + k * stride:first + k * stride + n] for k in range(count)]


def arrays(*shapes):
    """Zeroed, C-contiguous float64 arrays of these shapes, cut from one buffer, their
    starts 64-byte aligned and spread over the page as :func:`vectors`' are: for bases
    (2-D, a vector a row) that a kernel reads and writes across, an operator applied to a
    row of one and stored in a row of another, or in a vector.  (Rows within one array
    stay their length apart.)"""
    spacing = max(LINE, PAGE // max(len(shapes), 1) // LINE * LINE)
    sizes = [int(np.prod(shape)) for shape in shapes]
    starts, end = [], 0
    for k, size in enumerate(sizes):
        end += ((k * spacing - end * 8) % PAGE) // 8        # to this array's place in the page
        starts.append(end)
        end += size
    buffer = np.zeros(end + LINE // 8)
    first = (-buffer.ctypes.data % LINE) // 8
    return [buffer[first + start:first + start + size].reshape(shape)
            for start, size, shape in zip(starts, sizes, shapes)]
