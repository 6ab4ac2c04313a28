"""Controllers: serial emulation, MPI (standard and pipelined), threads."""
