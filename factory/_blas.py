"""OpenBLAS's thread count, set in one place: before numpy is first imported.

The factory's numpy work in a control step is on 3x3 and 4x4 matrices (poses, frames, the
delta actions). With OpenBLAS's default of one thread per core, each such call hands work to a
second thread that then spins: on this project's 2-core machine a 4x4 `inv` took 0.19 s per
50,000 calls against 0.10 s with one thread, and the process burned twice the CPU time
(`benchmarks/bench_bimanual.py`, TwoArmPegInHole: the generator at 0.43 of bare `mj_step`
per CPU second with two threads, 0.80 with one). Ray's workers already run with one (Ray sets
OMP_NUM_THREADS=1 for a one-CPU actor, which OpenBLAS reads); this gives the CLI's own
processes, the benchmarks and the tests the same. A user's own OPENBLAS_NUM_THREADS is kept;
torch's CPU threads (its own OpenMP) are untouched.
"""

from __future__ import annotations

import os


def use_one_blas_thread() -> str:
    """Set OPENBLAS_NUM_THREADS to 1 unless the user set it; returns it. Effective only before
    numpy is first imported (OpenBLAS reads it when it loads)."""
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    return os.environ["OPENBLAS_NUM_THREADS"]
