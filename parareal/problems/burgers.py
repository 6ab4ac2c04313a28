"""3D viscous Burgers equation, the test problem of Ruprecht's pipelined Parareal study.

    u_t + (u^2/2)_x + (u^2/2)_y + (u^2/2)_z = nu (u_xx + u_yy + u_zz)
    on [0, 1)^3, periodic, finite differences on cell centres x_i = (i + 1/2) h.

Two discretizations on the same grid, as in the study (Euro-Par 2017; its code,
PararealF90): ``order=1`` (coarse) is first-order upwind fluxes with second-order
diffusion; ``order=5`` (fine) is fifth-order WENO fluxes (Jiang & Shu), upwinded by the
sign of the mean velocity at each face, with fourth-order diffusion.

The initial value: ``"sine"`` is sin(2 pi x) sin(2 pi y) sin(2 pi z); ``"pararealf90"``
(the default) is what the study's code actually sets up, sin(2 pi x) sin(2 pi y)^2 (its
generator uses y where z was meant), constant in z.  It matters: with the study's step
sizes on 40^3, forward Euler is stable for the latter and not for the former.
"""
import numpy as np

from pipekrylov.kernels.compile import jit

__all__ = ["Burgers3D"]

_SIGNATURE = ["void(f8[:, :, ::1], f8[:, :, ::1], f8, f8)"]
# No fast-math: Parareal's controllers must reproduce each other bit for bit, and
# reassociation could make results depend on array alignment.
_EXACT = {"fastmath": False}


class Burgers3D:
    """The periodic 3D viscous Burgers problem on an ``n**3`` grid.

    Parameters
    ----------
    n : int
        Grid points per direction (40 in the study).
    nu : float
        Viscosity (0.02 in the study).
    order : {1, 5}
        Spatial discretization: 1 = upwind + 2nd-order diffusion, 5 = WENO5 + 4th-order.
    """

    def __init__(self, n=40, nu=0.02, order=5, initial="pararealf90"):
        if order not in (1, 5):
            raise ValueError(f"order must be 1 or 5, not {order!r}")
        if n < 6:
            raise ValueError(f"n must be at least 6 (the WENO5 stencil), not {n}")
        if initial not in ("pararealf90", "sine"):
            raise ValueError(f"initial must be 'pararealf90' or 'sine', not {initial!r}")
        self.n, self.nu, self.order, self.initial = int(n), float(nu), order, initial
        self.shape = (self.n,) * 3
        self._kernel = _rhs_weno5 if order == 5 else _rhs_upwind

    def initial_value(self):
        s = np.sin(2 * np.pi * (np.arange(self.n) + 0.5) / self.n)
        if self.initial == "pararealf90":
            y, z = s * s, np.ones(self.n)
        else:
            y, z = s, s
        return np.ascontiguousarray(s[:, None, None] * y[None, :, None] * z[None, None, :])

    def rhs(self, t, u, out):
        """``out = f(t, u)``; autonomous.  Runs without the GIL."""
        self._kernel(u, out, self.nu, 1.0 / self.n)

    def __repr__(self):
        return f"Burgers3D(n={self.n}, nu={self.nu}, order={self.order})"


@jit(["f8(f8, f8, f8, f8, f8)"], inline="always", **_EXACT)
def _weno5_face(a, b, c, d, e):
    """WENO5 value at the face downwind of ``c`` from a..e in upwind order (Jiang & Shu)."""
    s0 = 13.0 / 12.0 * (a - 2.0 * b + c) ** 2 + 0.25 * (a - 4.0 * b + 3.0 * c) ** 2
    s1 = 13.0 / 12.0 * (b - 2.0 * c + d) ** 2 + 0.25 * (b - d) ** 2
    s2 = 13.0 / 12.0 * (c - 2.0 * d + e) ** 2 + 0.25 * (3.0 * c - 4.0 * d + e) ** 2
    w0 = 0.1 / (1e-6 + s0) ** 2
    w1 = 0.6 / (1e-6 + s1) ** 2
    w2 = 0.3 / (1e-6 + s2) ** 2
    q0 = (2.0 * a - 7.0 * b + 11.0 * c) / 6.0
    q1 = (-b + 5.0 * c + 2.0 * d) / 6.0
    q2 = (2.0 * c + 5.0 * d - e) / 6.0
    return (w0 * q0 + w1 * q1 + w2 * q2) / (w0 + w1 + w2)


@jit(["f8(f8, f8, f8, f8, f8, f8)"], inline="always", **_EXACT)
def _weno5_flux(um2, um1, u0, up1, up2, up3):
    """Flux u^2/2 at the face between u0 and up1, upwinded by the mean velocity there."""
    if u0 + up1 >= 0.0:
        return _weno5_face(0.5 * um2 * um2, 0.5 * um1 * um1, 0.5 * u0 * u0,
                           0.5 * up1 * up1, 0.5 * up2 * up2)
    return _weno5_face(0.5 * up3 * up3, 0.5 * up2 * up2, 0.5 * up1 * up1,
                       0.5 * u0 * u0, 0.5 * um1 * um1)


@jit(["f8(f8, f8)"], inline="always", **_EXACT)
def _upwind_flux(u0, up1):
    return 0.5 * u0 * u0 if u0 + up1 >= 0.0 else 0.5 * up1 * up1


@jit(["f8(f8, f8, f8, f8, f8)"], inline="always", **_EXACT)
def _diffusion4(um2, um1, u0, up1, up2):
    return -um2 + 16.0 * um1 - 30.0 * u0 + 16.0 * up1 - up2


@jit(_SIGNATURE, **_EXACT)
def _rhs_weno5(u, out, nu, h):
    n = u.shape[0]
    c = nu / (12.0 * h * h)
    for i in range(n):
        i3, i2, i1 = (i - 3) % n, (i - 2) % n, (i - 1) % n
        ip1, ip2, ip3 = (i + 1) % n, (i + 2) % n, (i + 3) % n
        for j in range(n):
            j3, j2, j1 = (j - 3) % n, (j - 2) % n, (j - 1) % n
            jp1, jp2, jp3 = (j + 1) % n, (j + 2) % n, (j + 3) % n
            for k in range(n):
                k3, k2, k1 = (k - 3) % n, (k - 2) % n, (k - 1) % n
                kp1, kp2, kp3 = (k + 1) % n, (k + 2) % n, (k + 3) % n
                v = u[i, j, k]
                div = (_weno5_flux(u[i2, j, k], u[i1, j, k], v, u[ip1, j, k], u[ip2, j, k], u[ip3, j, k])
                       - _weno5_flux(u[i3, j, k], u[i2, j, k], u[i1, j, k], v, u[ip1, j, k], u[ip2, j, k])
                       + _weno5_flux(u[i, j2, k], u[i, j1, k], v, u[i, jp1, k], u[i, jp2, k], u[i, jp3, k])
                       - _weno5_flux(u[i, j3, k], u[i, j2, k], u[i, j1, k], v, u[i, jp1, k], u[i, jp2, k])
                       + _weno5_flux(u[i, j, k2], u[i, j, k1], v, u[i, j, kp1], u[i, j, kp2], u[i, j, kp3])
                       - _weno5_flux(u[i, j, k3], u[i, j, k2], u[i, j, k1], v, u[i, j, kp1], u[i, j, kp2]))
                lap = (_diffusion4(u[i2, j, k], u[i1, j, k], v, u[ip1, j, k], u[ip2, j, k])
                       + _diffusion4(u[i, j2, k], u[i, j1, k], v, u[i, jp1, k], u[i, jp2, k])
                       + _diffusion4(u[i, j, k2], u[i, j, k1], v, u[i, j, kp1], u[i, j, kp2]))
                out[i, j, k] = -div / h + c * lap


@jit(_SIGNATURE, **_EXACT)
def _rhs_upwind(u, out, nu, h):
    n = u.shape[0]
    c = nu / (h * h)
    for i in range(n):
        i1, ip1 = (i - 1) % n, (i + 1) % n
        for j in range(n):
            j1, jp1 = (j - 1) % n, (j + 1) % n
            for k in range(n):
                k1, kp1 = (k - 1) % n, (k + 1) % n
                v = u[i, j, k]
                div = (_upwind_flux(v, u[ip1, j, k]) - _upwind_flux(u[i1, j, k], v)
                       + _upwind_flux(v, u[i, jp1, k]) - _upwind_flux(u[i, j1, k], v)
                       + _upwind_flux(v, u[i, j, kp1]) - _upwind_flux(u[i, j, k1], v))
                lap = (u[i1, j, k] + u[ip1, j, k] + u[i, j1, k] + u[i, jp1, k]
                       + u[i, j, k1] + u[i, j, kp1] - 6.0 * v)
                out[i, j, k] = -div / h + c * lap
