"""Compiled (Numba) kernels: CSR products, fused vector updates, triangular solves.

Pure local computation: no MPI here.  Compiled once per machine into Numba's cache.
"""
from .fused import FusedKernel, dot, fused_kernel
from .spmv import csr_matvec, csr_matvec_add_rows, csr_matvec_rows, gather

__all__ = ["FusedKernel", "dot", "fused_kernel", "csr_matvec", "csr_matvec_add_rows",
           "csr_matvec_rows", "gather"]
