"""Distributed matrices and the ways to build them."""
from .distributed import DistributedCSR
from .generators import convection_diffusion2d, anisotropic2d, poisson2d, poisson3d
from .io import read_matrix, read_matrix_market, read_petsc_binary, write_petsc_binary

__all__ = ["DistributedCSR", "poisson2d", "poisson3d", "anisotropic2d", "convection_diffusion2d",
           "read_matrix", "read_matrix_market", "read_petsc_binary", "write_petsc_binary"]
