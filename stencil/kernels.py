"""Compiled kernels: one Jacobi step on a range of layers (index ranges of axis 0).

A *layer* is a plane of a 3D grid or a row of a 2D grid.  Every scheduler of the package
(the plain sweep, the pipelined thread team, the distributed slab) is built from one call:

    kernel(src, dst, a, c0, c1, k0, k1, rows_per_block)

which writes ``dst[k0:k1]`` (the points of those layers that the boundary condition
updates) from ``src``.  Layers ``k0-1`` and ``k1`` of ``src`` must hold valid values:
along axis 0 the caller provides neighbours (ghost layers, :mod:`stencil.slab`), along
the other axes the kernel applies the boundary condition itself.  In 3D the
rows of each layer are taken in blocks of ``rows_per_block`` rows, all layers of the
range per block, so the three planes a row needs stay in the core's L2 cache.

The source is generated per (ndim, boundary, coefficient form), and for the layer
kernel also with rows written by streaming stores (:mod:`stencil.streaming`, for
``Sweep(streaming_stores=True)``); it can be printed with :func:`kernel_source`, and is
compiled once per machine into Numba's cache without fast-math, so the additions happen
in the reference's order (no FMA contraction) and the results are bit for bit those of
:mod:`stencil.reference`.
"""
import hashlib
import inspect

import numba
import numpy as np

from pipekrylov.kernels.compile import compile_source

from . import streaming as streaming_module

__all__ = ["layer_kernel", "kernel_source", "wavefront_kernel", "wavefront_source", "dummy_coefficient"]

def _update(ndim, variable, centre, neighbours, a):
    total = neighbours[0]
    for term in neighbours[1:]:
        total = f"({total} + {term})"
    if variable:
        return f"{centre} + {a}*({total} - {2 * ndim}.0*{centre})"
    return f"c0*{centre} + c1*{total}"


def _row_code(ndim, periodic, variable, indent, streaming=False):
    """The loop over one row (last axis): vectorizable interior (or the streaming-store
    row of :mod:`stencil.streaming`), then wrapped end points."""
    rows = ["c", "s", "n", "b", "t"] if ndim == 3 else ["c", "b", "t"]
    def point(i, left, right):
        neighbours = [f"c[{left}]", f"c[{right}]"] + [f"{r}[{i}]" for r in rows[1:]]
        return f"w[{i}] = " + _update(ndim, variable, f"c[{i}]", neighbours, f"arow[{i}]")
    pad = " " * indent
    if streaming:
        code = [f"{pad}row(w, c, arow, ({', '.join(rows[1:])}), c0, c1)"]
    else:
        code = [f"{pad}for i in range(1, nx - 1):", f"{pad}    " + point("i", "i - 1", "i + 1")]
    if periodic:
        code += [f"{pad}{point('0', 'nx - 1', '1')}", f"{pad}{point('nx - 1', 'nx - 2', '0')}"]
    return code


def _layer_code(ndim, periodic, variable, indent, rows=None, streaming=False):
    """Update layer ``k`` from ``src`` into ``dst``: a whole 2D row, or the rows
    ``range(*rows)`` of a 3D plane."""
    pad = " " * indent
    if ndim == 2:
        return ([f"{pad}c = src[k]", f"{pad}w = dst[k]", f"{pad}b = src[k - 1]", f"{pad}t = src[k + 1]",
                 f"{pad}arow = a[k]" if variable else f"{pad}arow = c"]
                + _row_code(2, periodic, variable, indent, streaming))
    code = [f"{pad}for j in range({', '.join(rows)}):",
            f"{pad}    js = j - 1", f"{pad}    jn = j + 1"]
    if periodic:
        code += [f"{pad}    if js < 0:", f"{pad}        js = ny - 1",
                 f"{pad}    if jn == ny:", f"{pad}        jn = 0"]
    pad += "    "
    code += [f"{pad}c = src[k, j]", f"{pad}w = dst[k, j]", f"{pad}s = src[k, js]",
             f"{pad}n = src[k, jn]", f"{pad}b = src[k - 1, j]", f"{pad}t = src[k + 1, j]"]
    code += [f"{pad}arow = a[k, j]" if variable else f"{pad}arow = c"]
    return code + _row_code(3, periodic, variable, indent + 4, streaming)


def kernel_source(ndim, periodic, variable, streaming=False):
    """Python source of the layer kernel for this stencil form (see the module docstring);
    ``streaming``: rows written by non-temporal stores (:mod:`stencil.streaming`)."""
    lines = []
    if streaming:
        # The digest of stencil/streaming.py names the source file, so that a change
        # there compiles anew instead of loading a stale kernel from Numba's cache.
        digest = hashlib.sha256(inspect.getsource(streaming_module).encode()).hexdigest()[:12]
        lines += [f"from stencil.streaming import store_fence, streaming_row  # {digest}",
                  f"row = streaming_row({ndim}, {variable})", ""]
    lines += ["def layers(src, dst, a, c0, c1, k0, k1, rows_per_block):",
              "    nx = src.shape[-1]"]
    if ndim == 2:
        lines += ["    for k in range(k0, k1):"]
        lines += _layer_code(2, periodic, variable, 8, streaming=streaming)
    else:
        jlo, jhi = ("0", "ny") if periodic else ("1", "ny - 1")
        lines += ["    ny = src.shape[1]",
                  f"    for j0 in range({jlo}, {jhi}, rows_per_block):",
                  f"        j1 = min(j0 + rows_per_block, {jhi})",
                  "        for k in range(k0, k1):"]
        lines += _layer_code(3, periodic, variable, 12, ("j0", "j1"), streaming)
    if streaming:
        lines += ["    store_fence()      # streaming stores are weakly ordered"]
    return "\n".join(lines) + "\n"


def wavefront_source(ndim, periodic, variable):
    """Python source of the tile wavefront kernel (see :func:`wavefront_kernel`)."""
    lines = ["def wavefront(buf0, buf1, a, c0, c1, lo, hi, first, last, front0, front1):",
             "    nx = buf0.shape[-1]"]
    lines += ["    ny = buf0.shape[1]"] if ndim == 3 else []
    lines += ["    for front in range(front0, front1):",
             "        for step in range(lo.size):",
             "            k = front - step",
             "            if k < lo[step] or k >= hi[step]:",
             "                continue",
             "            if step % 2 == 0:",
             "                src = buf0",
             "                dst = buf1",
             "            else:",
             "                src = buf1",
             "                dst = buf0"]
    # A periodic axis 1 is one tile: its ends are neighbours, no order of tiles exists.
    if ndim == 2:
        lines += (_layer_code(2, True, variable, 12) if periodic else _tile_row_code(variable, 12))
    else:
        lines += _layer_code(3, periodic, variable, 12, ("0", "ny") if periodic else ("first[step]", "last[step]"))
    return "\n".join(lines) + "\n"


def _tile_row_code(variable, indent):
    """A 2D tile's part of row ``k``: views that start at the tile, so that the loop index
    counts from 0 (from a loaded start Numba keeps a negative-index test that blocks SIMD)."""
    pad = " " * indent
    return [f"{pad}i0 = first[step]", f"{pad}i1 = last[step]",
            f"{pad}c = src[k, i0 - 1:i1 + 1]", f"{pad}w = dst[k, i0:i1]",
            f"{pad}b = src[k - 1, i0:i1]", f"{pad}t = src[k + 1, i0:i1]",
            f"{pad}arow = a[k, i0:i1]" if variable else f"{pad}arow = c",
            f"{pad}for q in range(i1 - i0):",
            f"{pad}    w[q] = " + _update(2, variable, "c[q + 1]", ["c[q]", "c[q + 2]", "b[q]", "t[q]"], "arow[q]")]


def layer_kernel(ndim, periodic, variable, streaming=False):
    """The compiled layer kernel (compiled once per process and machine); releases the GIL."""
    array = numba.types.Array(numba.float64, ndim, "C")
    signature = numba.void(array, array, array, numba.float64, numba.float64,
                           numba.int64, numba.int64, numba.int64)
    return compile_source(kernel_source(ndim, periodic, variable, streaming), "layers", [signature],
                          fastmath=False)


def wavefront_kernel(ndim, periodic, variable):
    """The compiled tile wavefront kernel (compiled once per process and machine).

    ``wavefront(buf0, buf1, a, c0, c1, lo, hi, first, last, front0, front1)`` takes the
    steps ``0 .. len(lo)-1`` of a pass over one tile, as a wavefront along axis 0: at
    front ``f`` step ``s`` updates layer ``f - s`` if it lies in ``[lo[s], hi[s])``, over
    ``[first[s], last[s])`` of axis 1.  Step ``s`` reads ``buf{s % 2}`` and writes the other.
    The caller runs fronts ``[front0, front1)``; layer ``f - s`` of step ``s`` then needs
    only step ``s - 1``'s layers up to ``f - s + 1``, done at the same front just before.
    """
    array = numba.types.Array(numba.float64, ndim, "C")
    index = numba.types.Array(numba.int64, 1, "C")
    signature = numba.void(array, array, array, numba.float64, numba.float64,
                           index, index, index, index, numba.int64, numba.int64)
    return compile_source(wavefront_source(ndim, periodic, variable), "wavefront", [signature],
                          fastmath=False)


def dummy_coefficient(ndim):
    """What constant-coefficient kernels receive in place of the field ``a`` (unused)."""
    return np.zeros((1,) * ndim)
