"""parareal: parallel-in-time integration (standard and pipelined Parareal)."""
__version__ = "0.1.0"
