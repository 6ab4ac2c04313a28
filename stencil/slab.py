"""The layers one process updates, with ghost layers of depth T along axis 0.

A slab holds this process's owned layers of the grid between ghost layers copied from
its neighbours (or, with periodic boundaries on one process, from its own other end).
Ghosts ``T`` deep let the process take ``T`` steps between two exchanges: each step
invalidates one more ghost layer, so step ``s`` of a pass of ``P <= T`` steps updates a
range that shrinks by one layer per step on each ghost side and ends, after the pass,
exactly on the owned layers.  At a Dirichlet end of the global grid there are no ghosts:
the first (last) owned layer is the boundary and is never updated.

Two buffers alternate as source and destination; both start with the whole slab, so the
fixed boundary points are in each.  After a pass ``buffers[0]`` is current.
"""
import functools

import numpy as np

from .kernels import dummy_coefficient, layer_kernel, wavefront_kernel

__all__ = ["Slab"]


class Slab:
    """Owned layers plus ghosts for ``stencil``.

    Parameters
    ----------
    owned : ndarray
        This process's layers of the grid (axis 0), copied in.
    stencil : Stencil
        Its ``coefficient`` (variable form) is this process's owned layers of the field.
    depth : int
        Ghost depth T: the longest pass between two exchanges.
    ghost_below, ghost_above : bool
        Whether a neighbour (or the periodic wrap) lies on that side; otherwise that side
        is a Dirichlet boundary of the global grid.
    """

    def __init__(self, owned, stencil, depth, ghost_below, ghost_above):
        self.stencil, self.depth = stencil, int(depth)
        self.below = self.depth if ghost_below else 0
        self.above = self.depth if ghost_above else 0
        self.nowned = owned.shape[0]
        shape = (self.below + self.nowned + self.above,) + owned.shape[1:]
        first = np.empty(shape)
        first[self.below:self.below + self.nowned] = owned
        self.buffers = [first, first.copy()]
        if stencil.variable:
            self.coefficient = np.zeros(shape)
            self.coefficient[self.owned_slice] = stencil.coefficient
        else:
            self.coefficient = dummy_coefficient(stencil.ndim)
        self.kernel = layer_kernel(stencil.ndim, stencil.periodic, stencil.variable)

    @functools.cached_property
    def streaming_kernel(self):
        """The layer kernel with streaming stores, loaded when a scheduler first asks for it."""
        s = self.stencil
        return layer_kernel(s.ndim, s.periodic, s.variable, streaming=True)

    @functools.cached_property
    def tile_kernel(self):
        """The wavefront kernel, loaded when a scheduler first asks for it."""
        s = self.stencil
        return wavefront_kernel(s.ndim, s.periodic, s.variable)

    @property
    def owned_slice(self):
        return slice(self.below, self.below + self.nowned)

    @property
    def owned(self):
        """The current values of the owned layers (a view)."""
        return self.buffers[0][self.owned_slice]

    @property
    def nlayers(self):
        return self.buffers[0].shape[0]

    def update_range(self, step, steps):
        """Layers ``[lo, hi)`` that step ``step`` (0-based) of a pass of ``steps`` updates."""
        lo = self.depth - steps + step + 1 if self.below else 1
        hi = self.nlayers - (self.depth - steps + step + 1 if self.above else 1)
        return lo, hi

    def update(self, step, k0, k1, rows_per_block, streaming=False):
        """Step ``step`` of the pass on layers ``[k0, k1)`` (clip to the update range first);
        ``streaming``: write them by non-temporal stores."""
        src, dst = self.buffers[step % 2], self.buffers[(step + 1) % 2]
        s = self.stencil
        kernel = self.streaming_kernel if streaming else self.kernel
        kernel(src, dst, self.coefficient, s.c0, s.c1, k0, k1, rows_per_block)

    def update_tile(self, lo, hi, first, last, front0, front1):
        """Fronts ``[front0, front1)`` of a pass over one tile: layer ranges ``[lo[s], hi[s])``,
        axis-1 ranges ``[first[s], last[s])`` (see :func:`stencil.kernels.wavefront_kernel`)."""
        s = self.stencil
        self.tile_kernel(*self.buffers, self.coefficient, s.c0, s.c1, lo, hi, first, last,
                         front0, front1)

    def finish_pass(self, steps):
        if steps % 2:
            self.buffers.reverse()
