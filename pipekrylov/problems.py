"""Generated problems named on the command line, ``NAME:N``: parsed, and sized without
building them (for the performance model).  Imports nothing heavy: a process that only
launches MPI jobs (``pipekrylov scaling run``) must not start MPI itself."""

from .memory import check_memory

__all__ = ["GENERATORS", "check_problem_memory", "parse_problem", "problem_size"]

GENERATORS = ("poisson2d", "poisson3d", "anisotropic2d", "convection_diffusion2d")


def parse_problem(problem):
    """``NAME:N`` -> (NAME, N), with NAME a generator and N >= 2 points per axis."""
    name, _, n = problem.partition(":")
    if name not in GENERATORS:
        raise ValueError(f"--problem {problem!r}: unknown problem {name!r}; choose from {', '.join(GENERATORS)}")
    if n and not (n.isdigit() and int(n) >= 2):
        raise ValueError(f"--problem {problem!r}: N must be an integer of at least 2 (points per axis)")
    return name, int(n or 100)


def problem_size(problem):
    """(n, nnz) of a generated problem NAME:N without building it."""
    name, n = parse_problem(problem)
    if name == "poisson3d":
        return n ** 3, 7 * n ** 3 - 6 * n ** 2
    return n ** 2, 5 * n ** 2 - 4 * n


def check_problem_memory(problem, comm=None, label=None):
    """Refuse a generated problem too large for the machine before it is built: per row
    of a rank's share, about 30 vectors (a deep pipeline's basis, the solver's, the
    generator's temporaries), and per nonzero the CSR and the generator's triplets.
    Collective when ``comm`` has several ranks."""
    n, nnz = problem_size(problem)
    ranks = 1 if comm is None else comm.Get_size()
    check_memory(f"{label or f'--problem {problem}'} ({n} unknowns)", (8 * 30 * n + 40 * nnz) / ranks, comm)
