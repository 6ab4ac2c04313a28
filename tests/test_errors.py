"""Errors raised on some ranks reach every rank, with each rank's reason."""
import pytest

from pipekrylov.parallel import CollectiveError, collective_check, raise_on_any


@pytest.mark.mpi
def test_error_on_last_rank_reaches_every_rank(comm):
    last = comm.Get_size() - 1
    with pytest.raises(ValueError, match=f"bad input on {last}"):
        with collective_check(comm, "reader"):
            if comm.Get_rank() == last:
                raise ValueError(f"bad input on {last}")


@pytest.mark.mpi
def test_no_error_anywhere_passes(comm):
    with collective_check(comm):
        pass
    raise_on_any(comm, None)


@pytest.mark.mpi(min_size=2)
def test_different_exception_types_become_collective_error(comm):
    error = KeyError("k") if comm.Get_rank() == 0 else (TypeError("t") if comm.Get_rank() == 1 else None)
    with pytest.raises(CollectiveError, match="rank 0.*rank 1"):
        raise_on_any(comm, error, "mixed")


def test_import_does_not_load_petsc():
    import subprocess
    import sys
    code = "import pipekrylov, parareal, stencil, sys; print('petsc4py' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "False"   # (an MPI may print a line at start-up)


def test_the_scaling_launcher_does_not_start_mpi_itself():
    """`pipekrylov scaling run` starts mpirun jobs; if its own process started MPI (an
    import of mpi4py.MPI), Open MPI's launcher in the children fails without a word."""
    import subprocess
    import sys
    code = "import pipekrylov.cli, pipekrylov.scaling, sys; print('mpi4py.MPI' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "False"
