"""Speedup bounds (Ruprecht 2017) and defect plots."""
import numpy as np

__all__ = ["speedup_bound", "plot_defects"]


def speedup_bound(a, K, P, pipelined):
    """Parareal's speedup bound for coarse/fine cost ratio ``a``, K iterations, P slices.

    Standard: ``1 / ((1 + K) a + K / P)``; pipelined: ``1 / ((1 + K / P) a + K / P)``.
    """
    return 1.0 / (((1 + K / P) if pipelined else (1 + K)) * a + K / P)


def plot_defects(defects, path, title="Parareal defect per iteration", published=None):
    """Plot ``defects[k-1, n]`` (one line per slice, or one line for a 1-D array) against
    the iteration; ``published`` adds a reference line.  Needs matplotlib."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    defects = np.atleast_2d(np.asarray(defects, dtype=float).T).T
    fig, ax = plt.subplots(figsize=(6, 4))
    k = np.arange(1, defects.shape[0] + 1)
    if defects.shape[1] == 1:
        ax.semilogy(k, defects[:, 0], "o-", label="measured")
    else:
        for n in range(defects.shape[1]):
            ax.semilogy(k, defects[:, n], ".-", lw=0.8, label=f"slice {n}" if n < 8 else None)
    if published is not None:
        ax.semilogy(np.arange(1, len(published) + 1), published, "k--s", label="published")
    ax.set_xlabel("iteration k")
    ax.set_ylabel("relative max-norm defect")
    ax.set_title(title)
    ax.set_xticks(k)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
