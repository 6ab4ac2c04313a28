"""Compiled kernels: one Jacobi step on a range of layers (index ranges of axis 0).

A *layer* is a plane of a 3D grid or a row of a 2D grid.  Every scheduler of the package
(the plain sweep, the pipelined thread team, the distributed slab) is built from one call:

    kernel(src, dst, a, c0, c1, k0, k1, rows_per_block)

which writes ``dst[k0:k1]`` (the points of those layers that the boundary condition
updates) from ``src``.  Layers ``k0-1`` and ``k1`` of ``src`` must hold valid values:
along axis 0 the caller provides neighbours (ghost layers, :mod:`stencil.slab`), along
the other axes the kernel applies the boundary condition itself.  In 3D the
rows of each layer are taken in blocks of ``rows_per_block`` rows, all layers of the
range per block, so the planes a row needs stay in the core's L2 cache.  Layers are
updated four at a time (they share their rows along axis 0), the rest one by one.

The source is generated per (ndim, boundary, coefficient form), and for the layer
kernel also with rows written by streaming stores (for ``Sweep(streaming_stores=True)``);
it can be printed with :func:`kernel_source`.  Each row is updated by the vector row of
:mod:`stencil.vector_row` (LLVM IR with explicit vectors; the Python loop it stands for
is the comment above the kernel).  All is compiled
once per machine into Numba's cache without fast-math, so the additions happen in the
reference's order (no FMA contraction) and the results are bit for bit those of
:mod:`stencil.reference`.
"""
import hashlib
import inspect

import numba
import numpy as np

from pipekrylov.kernels.compile import compile_source

from . import vector_row as vector_row_module
from .vector_row import LAYERS

__all__ = ["layer_kernel", "kernel_source", "wavefront_kernel", "wavefront_source", "dummy_coefficient"]

def _update(ndim, variable, centre, neighbours, a):
    """The update of one point as Python source, neighbours added in the given order."""
    total = neighbours[0]
    for term in neighbours[1:]:
        total = f"({total} + {term})"
    if variable:
        return f"{centre} + {a}*({total} - {2 * ndim}.0*{centre})"
    return f"c0*{centre} + c1*{total}"


def _loop_comment(ndim, variable, periodic):
    """What ``row{n}`` of :mod:`stencil.vector_row` computes, as a comment."""
    rows = ["s", "n", "b", "t"] if ndim == 3 else ["b", "t"]
    neighbours = ["c[i - 1]", "c[i + 1]"] + [f"{r}[i]" for r in rows]
    sides = ", s = sides[2*r], n = sides[2*r + 1]" if ndim == 3 else ""
    return ["# row{n}(w, c, a, sides, c0, c1), for each layer r < n, with the rows c = c[r + 1],",
            f"# b = c[r], t = c[r + 2]{sides}, a = a[r] (variable coefficients), w = w[r]:",
            "#     for i in range(1, nx - 1): w[i] = " + _update(ndim, variable, "c[i]", neighbours, "a[i]")] + (
            ["#     and i = 0, nx - 1 alike with c[i - 1], c[i + 1] wrapped"] if periodic else [])


def _tuple(items):
    return f"({items[0]},)" if len(items) == 1 else f"({', '.join(items)})"


def _row_call(ndim, variable, layers, indent, row="j", part=""):
    """Row ``row`` (3D; 2D: the layer itself) of layers ``k .. k + layers - 1``, by
    ``row{layers}`` of :mod:`stencil.vector_row`; ``part``: a slice of the rows (2D tiles)."""
    pad = " " * indent
    def at(x, r, j=row):
        layer = "k" if r == 0 else f"k {'+' if r > 0 else '-'} {abs(r)}"
        return f"{x}[{layer}, {j}{part}]" if ndim == 3 else f"{x}[{layer}{part}]"
    code = [f"{pad}w = {_tuple([at('dst', r) for r in range(layers)])}",
            f"{pad}c = {_tuple([at('src', r) for r in range(-1, layers + 1)])}"]
    coefficient = "w"
    if variable:
        code.append(f"{pad}a_rows = {_tuple([at('a', r) for r in range(layers)])}")
        coefficient = "a_rows"
    sides = "()"
    if ndim == 3:
        sides = "sides"
        code.append(f"{pad}sides = {_tuple([at('src', r, j) for r in range(layers) for j in ('js', 'jn')])}")
    return code + [f"{pad}row{layers}(w, c, {coefficient}, {sides}, c0, c1)"]


def _rows_of_plane(periodic, indent, rows):
    """``for j in range(*rows)`` with its neighbours ``js``, ``jn`` along axis 1 (3D)."""
    pad = " " * indent
    code = [f"{pad}for j in range({', '.join(rows)}):",
            f"{pad}    js = j - 1", f"{pad}    jn = j + 1"]
    if periodic:
        code += [f"{pad}    if js < 0:", f"{pad}        js = ny - 1",
                 f"{pad}    if jn == ny:", f"{pad}        jn = 0"]
    return code


def _import_rows(ndim, periodic, variable, layers, nontemporal=False):
    # The digest of stencil/vector_row.py names the source file, so that a change there
    # compiles anew instead of loading a stale kernel from Numba's cache.
    digest = hashlib.sha256(inspect.getsource(vector_row_module).encode()).hexdigest()[:12]
    names = "store_fence, vector_row" if nontemporal else "vector_row"
    return ([f"from stencil.vector_row import {names}  # {digest}"]
            + [f"row{n} = vector_row({ndim}, {variable}, periodic={periodic}, layers={n}, nontemporal={nontemporal})"
               for n in layers] + [""] + _loop_comment(ndim, variable, periodic))


def kernel_source(ndim, periodic, variable, streaming=False):
    """Python source of the layer kernel for this stencil form (see the module docstring);
    ``streaming``: rows written by non-temporal stores (:mod:`stencil.vector_row`)."""
    lines = _import_rows(ndim, periodic, variable, sorted({1, LAYERS}), streaming)
    lines += ["def layers(src, dst, a, c0, c1, k0, k1, rows_per_block):"]
    # LAYERS layers at a time (they share their rows along axis 0), then one at a time
    groups = [(LAYERS, f"range(k0, k1 - {LAYERS - 1}, {LAYERS})"), (1, f"range(k1 - (k1 - k0) % {LAYERS}, k1)")]
    if ndim == 2:
        for layers, ks in groups:
            lines += [f"    for k in {ks}:"] + _row_call(2, variable, layers, 8)
    else:
        jlo, jhi = ("0", "ny") if periodic else ("1", "ny - 1")
        lines += ["    ny = src.shape[1]",
                  f"    for j0 in range({jlo}, {jhi}, rows_per_block):",
                  f"        j1 = min(j0 + rows_per_block, {jhi})"]
        for layers, ks in groups:
            lines += ([f"        for k in {ks}:"] + _rows_of_plane(periodic, 12, ("j0", "j1"))
                      + _row_call(3, variable, layers, 16))
    if streaming:
        lines += ["    store_fence()      # streaming stores are weakly ordered"]
    return "\n".join(lines) + "\n"


def wavefront_source(ndim, periodic, variable):
    """Python source of the tile wavefront kernel (see :func:`wavefront_kernel`)."""
    lines = _import_rows(ndim, periodic, variable, [1])
    lines += ["def wavefront(buf0, buf1, a, c0, c1, lo, hi, first, last, front0, front1):"]
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
    if ndim == 3:
        rows = ("0", "ny") if periodic else ("first[step]", "last[step]")
        lines += _rows_of_plane(periodic, 12, rows) + _row_call(3, variable, 1, 16)
    elif periodic:      # a periodic axis 1 is one tile: its ends are neighbours
        lines += _row_call(2, variable, 1, 12)
    else:               # a 2D tile is a part of the row, with one point more on each side
        lines += ["            i0 = first[step] - 1", "            i1 = last[step] + 1"]
        lines += _row_call(2, variable, 1, 12, part=", i0:i1")
    return "\n".join(lines) + "\n"


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
    (One layer per front: fronts of four layers, sharing their rows as the sweep's do,
    quadruple the tile's span in L2 and were no faster here.)
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
