"""What measuring reference coverage costs next to plain verification of the same tasks.

    .venv/bin/python bench/coverage_cost.py [--n 100] [--repeats 3] [--params params.yaml]

Generates ``n`` tasks (``codeloop.data.generator``), then on one sandbox executor (the
params' sandbox section) times, ``repeats`` times each after one warm-up of both:
plain verification (the reference against all its tests, one ``run_many``) and
``reference_coverage`` of the same tests (one ``run_many``, traced). Prints the best wall
seconds of each, their ratio, and the mean statement and branch coverage.
"""

from __future__ import annotations

import argparse
import time
from statistics import mean

from codeloop.config import load_params
from codeloop.data import coverage
from codeloop.data.generator import generate_tasks
from codeloop.sandbox import make_executor
from codeloop.sandbox.base import ExecJob


def _verify(executor, tasks) -> list:
    jobs = [
        ExecJob(code=t.reference_solution, tests=t.all_tests(), entry_point=t.entry_point)
        for t in tasks
    ]
    return executor.run_many(jobs)


def _cover(executor, tasks) -> list:
    coverage._static.cache_clear()  # charge every run the parsing of the references
    return coverage.reference_coverage(executor, [(t, t.all_tests()) for t in tasks])


def _best_of(repeats: int, fn, *args) -> tuple[float, list]:
    """Best wall seconds of ``repeats`` calls, and the last call's result."""
    best, out = float("inf"), []
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn(*args)
        best = min(best, time.perf_counter() - start)
    return best, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--params", default="params.yaml")
    args = ap.parse_args()
    tasks = generate_tasks(args.n)
    executor = make_executor(load_params(args.params).sandbox)
    try:
        _verify(executor, tasks)  # warm-up: zygotes started, imports cached
        _cover(executor, tasks)
        plain_s, results = _best_of(args.repeats, _verify, executor, tasks)
        cover_s, covs = _best_of(args.repeats, _cover, executor, tasks)
    finally:
        executor.close()
    measured = [c for c in covs if c is not None]
    passed = sum(r.passed for r in results)
    print(f"{len(tasks)} tasks ({passed} references pass), best of {args.repeats}:")
    print(
        f"  verification {plain_s:.3f} s, coverage {cover_s:.3f} s, ratio {cover_s / plain_s:.2f}x"
    )
    if measured:
        print(
            f"  measured {len(measured)}/{len(tasks)}: mean statements "
            f"{mean(c.statements for c in measured):.3f}, mean branches "
            f"{mean(c.branches for c in measured):.3f}"
        )


if __name__ == "__main__":
    main()
