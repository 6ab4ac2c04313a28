"""stencil: temporally blocked Jacobi stencils for shared-cache multicores, with MPI.

Kernels (:mod:`stencil.kernels`, generated and compiled per stencil form) update a range
of layers for one step, or a tile for a pass of steps; schedulers decide who updates what
when (:class:`Sweep`, the non-blocked baseline; :class:`PipelinedBlocking`, a thread team
lagging through the grid in the shared cache; :class:`WavefrontTiles`, skewed tiles each
taken through all steps of a pass in one core's cache);
the distributed layer gives each process a slab with halos T layers deep.  The numpy
reference (:func:`reference_run`) is the oracle every path reproduces bit for bit::

    from stencil import Stencil, advance, PipelinedBlocking
    s = Stencil.heat(3, 0.1)                        # u' = 0.4 u + 0.1 (sum of 6 neighbours)
    v = advance(u, s, 100, scheduler=PipelinedBlocking(team=2, block=4, steps_per_pass=8))
"""
from .checkpoint import Checkpoint, CheckpointWarning
from .distributed import gather_layers, layer_partition, scatter_layers
from .kernels import kernel_source
from .reference import reference_run, reference_step
from .roofline import bytes_per_update, memory_bound, stream
from .run import advance
from .schedulers import PipelinedBlocking, Sweep, WavefrontTiles
from .spec import Stencil
from .tuning import autotune, candidates

__version__ = "0.1.0"
__all__ = ["Stencil", "advance", "Sweep", "PipelinedBlocking", "WavefrontTiles", "Checkpoint", "CheckpointWarning", "autotune",
           "candidates", "reference_run", "reference_step", "kernel_source", "stream",
           "memory_bound", "bytes_per_update", "layer_partition", "scatter_layers", "gather_layers"]
