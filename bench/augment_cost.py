"""What test augmentation costs the clean stage, and what it buys, in one run.

    .venv/bin/python bench/augment_cost.py [--params params.yaml] [--out metrics/augment_cost.json]

Runs the clean stage's steps (``clean_tasks``) on the params' function-task sources
twice on one sandbox executor, with ``clean.augment.enabled`` and ``coverage`` off (the
baseline: the stage as it was) and on,
and prints the wall seconds of each, their ratio, and the test-quality summary by source
(tests per task and mutation score before/after). Repository tasks are switched off in
both runs: augmentation touches function tasks only.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from codeloop.config import load_params
from codeloop.data.augment import quality_summary
from codeloop.data.curate import clean_tasks
from codeloop.sandbox import make_executor


def _timed(params, executor) -> tuple[float, dict]:
    start = time.perf_counter()
    res = clean_tasks(params, executor)
    return time.perf_counter() - start, res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--out", default="metrics/augment_cost.json")
    args = ap.parse_args()
    base = load_params(args.params)
    clean = base.clean.model_copy(update={
        "repo_tasks": base.clean.repo_tasks.model_copy(update={"enabled": False})})
    runs = {}
    executor = make_executor(base.sandbox)
    try:
        for name, on in (("baseline", False), ("augmented", True)):
            aug = clean.augment.model_copy(update={"enabled": on, "coverage": on})
            params = base.model_copy(update={"clean": clean.model_copy(update={"augment": aug})})
            runs[name] = _timed(params, executor)
    finally:
        executor.close()
    off, on = runs["baseline"][0], runs["augmented"][0]
    quality = quality_summary(runs["augmented"][1]["test_quality"])
    print(f"clean (function tasks): baseline {off:.1f} s, augmented {on:.1f} s, "
          f"ratio {on / off:.2f}x")
    cols = ("tasks", "augmented", "weak", "mean_tests_before", "mean_tests_after",
            "mean_mutation_score_before", "mean_mutation_score_after")
    print("source".ljust(12) + "".join(c.removeprefix("mean_").rjust(24) for c in cols))
    for src, q in quality.items():
        print(src.ljust(12) + "".join(str(q[c]).rjust(24) for c in cols))
    out = {"baseline_s": round(off, 2), "augmented_s": round(on, 2),
           "ratio": round(on / off, 3), "test_quality": quality}
    Path(args.out).write_text(json.dumps(out, indent=2, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
