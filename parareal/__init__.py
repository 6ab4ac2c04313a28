"""parareal: parallel-in-time integration with standard and pipelined Parareal.

Problem (right-hand side, initial value) -> propagators (coarse and fine integrators)
-> controllers that only move states between time slices and decide convergence:

* :func:`run_serial` -- the serial emulation, the oracle the others reproduce;
* :func:`run_mpi` -- one rank per slice, pipelined (default) or standard;
* :func:`run_threads` -- one thread per slice in one process, pipelined or standard.

Monitoring and checkpointing are hooks (:mod:`parareal.hooks`).
"""
from .config import PararealConfig
from .controllers.common import PararealResult
from .controllers.mpi import run_mpi
from .controllers.serial import run_serial
from .controllers.threads import run_threads
from .hooks import Checkpoint, CheckpointWarning, Hook, PrintDefects

__version__ = "0.1.0"
__all__ = ["PararealConfig", "PararealResult", "run_serial", "run_mpi", "run_threads",
           "Hook", "Checkpoint", "CheckpointWarning", "PrintDefects"]
