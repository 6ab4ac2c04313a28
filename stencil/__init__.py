"""stencil: temporally blocked stencil kernels for shared-cache multicores."""
__version__ = "0.1.0"
