"""The heat equation on the unit square or interval with zero Dirichlet boundaries."""
import numpy as np
import scipy.sparse as sp

__all__ = ["Heat"]


class Heat:
    """``u_t = nu Laplace(u)`` on ``n**dim`` interior points of the unit cube, u = 0 on the
    boundary, ``u(x, 0) = prod sin(pi x_i) + prod sin(4 pi x_i) / 2`` (two decay rates).

    Linear: :meth:`operator` gives the sparse matrix ``L`` with ``u' = L u``, which the
    implicit propagators solve with; :meth:`rhs` applies it.
    """

    def __init__(self, n=32, dim=2, nu=0.1):
        if dim not in (1, 2, 3):
            raise ValueError(f"dim must be 1, 2 or 3, not {dim!r}")
        self.n, self.dim, self.nu = int(n), dim, float(nu)
        self.shape = (self.n,) * dim
        h = 1.0 / (self.n + 1)
        d1 = sp.diags([1.0, -2.0, 1.0], [-1, 0, 1], shape=(self.n, self.n)) / h ** 2
        eye = sp.identity(self.n)
        lap = sp.csr_matrix((self.n ** dim, self.n ** dim))
        for axis in range(dim):
            factors = [d1 if a == axis else eye for a in range(dim)]
            term = factors[0]
            for f in factors[1:]:
                term = sp.kron(term, f)
            lap = lap + term
        self._L = (self.nu * lap).tocsr()
        self._L.sort_indices()

    def operator(self):
        """The sparse matrix ``L`` (symmetric negative definite) with ``u' = L u``."""
        return self._L

    def initial_value(self):
        x = np.arange(1, self.n + 1) / (self.n + 1)
        grids = np.meshgrid(*([x] * self.dim), indexing="ij")
        slow = np.prod([np.sin(np.pi * g) for g in grids], axis=0)
        fast = np.prod([np.sin(4 * np.pi * g) for g in grids], axis=0)
        return np.ascontiguousarray(slow + 0.5 * fast)

    def rhs(self, t, u, out):
        out.reshape(-1)[:] = self._L @ u.reshape(-1)

    def __repr__(self):
        return f"Heat(n={self.n}, dim={self.dim}, nu={self.nu})"
