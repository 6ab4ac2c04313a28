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

The source is generated per (ndim, boundary, coefficient form), can be printed with
:func:`kernel_source`, and is compiled once per machine into Numba's cache without
fast-math, so the additions happen in the reference's order (no FMA contraction) and the
results are bit for bit those of :mod:`stencil.reference`.
"""
import numba
import numpy as np

from pipekrylov.kernels.compile import compile_source

__all__ = ["layer_kernel", "kernel_source", "dummy_coefficient"]

def _update(ndim, variable, centre, neighbours, a):
    total = neighbours[0]
    for term in neighbours[1:]:
        total = f"({total} + {term})"
    if variable:
        return f"{centre} + {a}*({total} - {2 * ndim}.0*{centre})"
    return f"c0*{centre} + c1*{total}"


def _row_code(ndim, periodic, variable, indent):
    """The loop over one row (last axis): vectorizable interior, then wrapped end points."""
    rows = ["c", "s", "n", "b", "t"] if ndim == 3 else ["c", "b", "t"]
    def point(i, left, right):
        neighbours = [f"c[{left}]", f"c[{right}]"] + [f"{r}[{i}]" for r in rows[1:]]
        return f"w[{i}] = " + _update(ndim, variable, f"c[{i}]", neighbours, f"arow[{i}]")
    pad = " " * indent
    code = [f"{pad}for i in range(1, nx - 1):", f"{pad}    " + point("i", "i - 1", "i + 1")]
    if periodic:
        code += [f"{pad}{point('0', 'nx - 1', '1')}", f"{pad}{point('nx - 1', 'nx - 2', '0')}"]
    return code


def kernel_source(ndim, periodic, variable):
    """Python source of the layer kernel for this stencil form (see the module docstring)."""
    lines = ["def layers(src, dst, a, c0, c1, k0, k1, rows_per_block):",
             "    nx = src.shape[-1]"]
    if ndim == 2:
        lines += ["    for k in range(k0, k1):"]
        lines += ["        c = src[k]", "        w = dst[k]", "        b = src[k - 1]", "        t = src[k + 1]"]
        lines += ["        arow = a[k]" if variable else "        arow = c"]
        lines += _row_code(2, periodic, variable, 8)
    else:
        jlo, jhi = ("0", "ny") if periodic else ("1", "ny - 1")
        lines += ["    ny = src.shape[1]",
                  f"    for j0 in range({jlo}, {jhi}, rows_per_block):",
                  f"        j1 = min(j0 + rows_per_block, {jhi})",
                  "        for k in range(k0, k1):"]
        lines += ["            for j in range(j0, j1):",
                  "                js = j - 1", "                jn = j + 1"]
        if periodic:
            lines += ["                if js < 0:", "                    js = ny - 1",
                      "                if jn == ny:", "                    jn = 0"]
        lines += ["                c = src[k, j]", "                w = dst[k, j]",
                  "                s = src[k, js]", "                n = src[k, jn]",
                  "                b = src[k - 1, j]", "                t = src[k + 1, j]"]
        lines += ["                arow = a[k, j]" if variable else "                arow = c"]
        lines += _row_code(3, periodic, variable, 16)
    return "\n".join(lines) + "\n"


def layer_kernel(ndim, periodic, variable):
    """The compiled layer kernel (compiled once per process and machine); releases the GIL."""
    array = numba.types.Array(numba.float64, ndim, "C")
    signature = numba.void(array, array, array, numba.float64, numba.float64,
                           numba.int64, numba.int64, numba.int64)
    return compile_source(kernel_source(ndim, periodic, variable), "layers", [signature],
                          fastmath=False)


def dummy_coefficient(ndim):
    """What constant-coefficient kernels receive in place of the field ``a`` (unused)."""
    return np.zeros((1,) * ndim)
