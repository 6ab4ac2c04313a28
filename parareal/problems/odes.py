"""Small ODE systems: the Lorenz attractor and the Brusselator."""
import numpy as np

__all__ = ["Lorenz", "Brusselator"]


class Lorenz:
    """``x' = s (y - x), y' = x (r - z) - y, z' = x y - b z`` (chaotic for the defaults)."""

    def __init__(self, sigma=10.0, rho=28.0, beta=8.0 / 3.0, u0=(1.0, 1.0, 1.0)):
        self.sigma, self.rho, self.beta = float(sigma), float(rho), float(beta)
        self.u0 = np.array(u0, dtype=float)
        self.shape = (3,)

    def initial_value(self):
        return self.u0.copy()

    def rhs(self, t, u, out):
        x, y, z = u
        out[0] = self.sigma * (y - x)
        out[1] = x * (self.rho - z) - y
        out[2] = x * y - self.beta * z


class Brusselator:
    """``x' = A + x^2 y - (B + 1) x, y' = B x - x^2 y`` (a limit cycle for B > 1 + A^2)."""

    def __init__(self, a=1.0, b=3.0, u0=(0.0, 1.0)):
        self.a, self.b = float(a), float(b)
        self.u0 = np.array(u0, dtype=float)
        self.shape = (2,)

    def initial_value(self):
        return self.u0.copy()

    def rhs(self, t, u, out):
        x, y = u
        xxy = x * x * y
        out[0] = self.a + xxy - (self.b + 1.0) * x
        out[1] = self.b * x - xxy
