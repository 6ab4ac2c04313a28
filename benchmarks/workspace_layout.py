"""Fused kernels on vectors allocated one by one against vectors cut from one buffer and
staggered over the 4 KiB page (:func:`pipekrylov.kernels.workspace.vectors`): the time of
one call, the best of ``--repeat`` rounds of 200 calls, in one run:

    python -m benchmarks.workspace_layout
    python -m benchmarks.workspace_layout --sizes 4096 16384 --repeat 9

Kernels: p-CG2's first iteration of a pair (20 vectors, 18 updates) and its second (14
vectors, 12 updates and 10 dots), and four AXPYs (8 vectors).  Serial: the layout is a
rank's own memory.
"""
import argparse
import time

import numpy as np

SIZES = [1024, 4096, 16384, 65536]


def kernels():
    from pipekrylov.kernels import fused_kernel
    from pipekrylov.loops import pipecg2
    four = fused_kernel(["x = x + alpha*p", "r = r - alpha*s", "u = u - alpha*q", "w = w - alpha*z"],
                        scalars=["alpha"], noalias=True)
    return {"p-cg2 first": pipecg2.first, "p-cg2 second": pipecg2.second, "4 axpy": four.function}


def time_call(kernel, vectors, repeat):
    names = kernel.py_func.__code__.co_varnames[:kernel.py_func.__code__.co_argcount - 2]
    args = [vectors[name] for name in names] + [np.array([1e-3, 2e-3, 3e-3]), np.zeros(16)]
    kernel(*args)
    best = np.inf
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(200):
            kernel(*args)
        best = min(best, (time.perf_counter() - t0) / 200)
    return best * 1e6


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="*", default=SIZES)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    from pipekrylov.kernels.workspace import vectors
    from benchmarks.common import cpu_name
    rows = []
    for n in args.sizes:
        names = "a ab e f g gh h hh p s q z c d x r u w m n".split()
        one_by_one = {name: np.random.default_rng(k).random(n) for k, name in enumerate(names)}
        spread = dict(zip(names, vectors(len(names), n)))
        for name in names:
            spread[name][:] = one_by_one[name]
        for label, kernel in kernels().items():
            alone, staggered = time_call(kernel, one_by_one, args.repeat), time_call(kernel, spread, args.repeat)
            rows.append([f"{n:,}", label, f"{alone:.1f}", f"{staggered:.1f}", f"{staggered / alone:.2f}"])
    print(f"time per call (us), {cpu_name()}")
    print("| n | kernel | one by one | staggered | staggered / one by one |\n|---|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
