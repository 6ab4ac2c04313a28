"""The deep variants written out for a given depth: what ``python -m pipekrylov derive cg
--depth 3`` prints.  Each line names the base method's step it stands for."""

__all__ = ["DeepAlgorithm", "deep_algorithm"]


class DeepAlgorithm:
    """A readable p(l)-CG or p(l)-GMRES for one depth: ``print()`` it."""

    def __init__(self, name, depth, title, lines):
        self.name, self.depth, self.title, self.lines = name, depth, title, lines

    def __str__(self):
        width = max(len(text) for text, _ in self.lines)
        out = [self.title]
        for text, origin in self.lines:
            out.append(f"{text:<{width}}  | {origin}" if origin else text)
        return "\n".join(out)


def deep_algorithm(name, depth):
    if name == "cg":
        return DeepAlgorithm(name, depth, _cg_title(depth), _cg_lines(depth))
    if name == "gmres":
        return DeepAlgorithm(name, depth, _gmres_title(depth), _gmres_lines(depth))
    raise ValueError(f"no deep pipeline for {name!r}: depth > 1 exists for 'cg' (p(l)-CG) "
                     "and 'gmres' (p(l)-GMRES)")


def _cg_title(l):
    return (f"p({l})-CG: preconditioned CG, pipeline depth {l} (pipekrylov.deep.plcg; a template, "
            "not a derivation: see docs/deep.md)\n"
            f"shifts sigma_0..sigma_{l - 1}: Chebyshev points of [0, theta_max + bound] "
            "(Lanczos estimate) unless given\n"
            f"{'':<4}<a, b> = a . b on this rank's rows, summed by the reduction; u_j = M^-1 z_j\n")


def _cg_lines(l):
    top = "z_i" if l == 1 else f"q{l - 1}_k"
    levels = ", ".join(["v_(k+1)"] + [f"q{m}_(k+1)" for m in range(1, l)])
    return [
        ("start-up", "from preconditioned CG"),
        ("  u_0 = b - A x_0;  v_0 = M u_0 / ||u_0||_M", "r_0 = b - A x_0;  z_0 = M r_0"),
        (f"  {2 * l} Lanczos steps by pipelined CG's recurrences: v_1 .. v_{2 * l}, T",
         "(fills the pipeline; each reduction behind an operator application)"),
        (f"  G[:, c] = P_c(T) e_0 (c <= {l}), P_{l}(T) e_(c-{l}) (c <= {2 * l});  z_c = V G[:, c]",
         "(exact: no Gram matrix to factor)"),
        (f"iteration i = {l}, {l + 1}, ...  (k = i - {l}: Lanczos step, c = i - {l - 1}: column of G; "
         f"up to i = {2 * l - 1} z and G come from the start-up)", ""),
        ("  u' = A z_i;  w = M u'", "q = A p;  z = M r"),
        (f"  wait R_c                         (started {l} iteration{'s' if l > 1 else ''} ago)",
         "the reductions (p, A p), (r, z)"),
        (f"  G[c-{2 * l} .. c-{l + 1}, c] = G[c-{l}, (c-{2 * l} .. c-{l + 1}) + {l}]"
         if l > 1 else "  G[c-2, c] = G[c-1, c-1]", "(symmetry of M A)"),
        (f"  drift = |R_c[-1] - G[c-{l + 1}, c]| / sqrt(<z_c, z_c>)   (R_c[-1] = <u_c, v_(c-{l + 1})>, "
         "the same entry)", "(above drift_tol: CG goes on as p-CG from x_k, p_(k-1))"),
        (f"  G[c-{l}, c] = R_c[0];  G[c-{l - 1} .. c, c]: forward substitution, square root"
         if l > 1 else "  G[c-1, c] = R_c[0];  G[c, c] = sqrt(R_c[1] - sum G[., c]^2)",
         "(sqrt of a negative number: restart at fallback_depth)"),
        ("  gamma_k, delta_k from G[k .. k+1, k .. k+1]", "alpha_k, beta_k (Lanczos T = tridiag)"),
        (f"  {levels}: three-term recurrences on {top}", "r_(k+1) = r_k - alpha_k A p_k"),
        ("  z_(i+1) = (w - gamma_k z_i - delta_(k-1) z_(i-1)) / delta_k;  u_(i+1) likewise", ""),
        (f"  start R_(i+1) = [<u_(i+1), v_c>, <u_(i+1), z_m> for m = c+1 .. i+1, <u_(i+1), v_(c-1)>]"
         f"   ({l + 2} numbers)",
         "one fused reduction"),
        ("  eta_k = gamma_k - delta_(k-1)^2 / eta_(k-1);  zeta_k = -delta_(k-1) / eta_(k-1) zeta_(k-1)",
         "LDL^T of T (D-Lanczos)"),
        ("  p_k = (v_k - delta_(k-1) p_(k-1)) / eta_k;  x += zeta_k p_k", "x_(k+1) = x_k + alpha_k p_k"),
        ("  ||r_(k+1)||_M = |zeta_k| delta_k / eta_k", "sqrt((r_(k+1), z_(k+1)))"),
    ]


def _gmres_title(l):
    return (f"p({l})-GMRES(m): right-preconditioned GMRES, pipeline depth {l} "
            "(pipekrylov.deep.plgmres; a template: see docs/deep.md)\n"
            f"shifts sigma_0..sigma_{l - 1}: Chebyshev points of the Ritz values' real parts "
            "(Arnoldi estimate) unless given\n")


def _gmres_lines(l):
    return [
        ("cycle", "from GMRES(m)"),
        ("  z_0 = b - A x_0;  start R_0 = [<z_0, z_0>]", "r_0, ||r_0||"),
        (f"  for j = 0 .. {l - 1}:  z_(j+1) = A M z_j - sigma_j z_j;  start R_(j+1) = [<z_(j+1), z_m>, m <= j+1]",
         "(fills the pipeline)"),
        (f"  iteration i = {l} .. m+{l - 1}  (k = i - {l}, c = i - {l - 1}):", ""),
        ("      w = A M z_i                                 (while i < m)", "w = A M v_k"),
        (f"      wait R_c (started {l} iteration{'s' if l > 1 else ''} ago);  G[:, c] by a Cholesky step",
         "h = V^T w, ||w||"),
        ("      H[:, k] = (G B[:, k] - H[:, :k] G[:k, k]) / G[k, k]", "Arnoldi column k"),
        ("      v_c = (z_c - V G[:c, c]) / G[c, c]", "v_(k+1) = w / h_(k+1,k)"),
        ("      z_(i+1) = (w - sum_r H[r, k] z_(r+" + str(l) + ")) / H[k+1, k]", ""),
        ("      start R_(i+1) = [<z_(i+1), v_j> j <= c, <z_(i+1), z_j> c < j <= i+1]", "one fused reduction"),
        ("      Givens rotation of H[:, k]; |g_(k+1)| is the residual estimate", "same"),
        ("  x += M V y,  y = R^-1 g", "same"),
    ]
