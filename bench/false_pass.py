"""False-pass rate of the reward, before and after test augmentation.

    .venv/bin/python bench/false_pass.py [--humaneval 40] [--synthetic 200] [--mutants 5] \
        [--slips 4] [--params params.yaml] [--out metrics/false_pass.csv]

A false pass: a sample the reward pays for (it passes every visible test) that fails a
hidden test. Tasks are split into visible and hidden tests as the clean stage does
(``clean.visible_fraction``, ``clean.min_visible``), then augmented with the clean
stage's settings (``clean.augment``, ``clean.verify_runs``; ``codeloop.data.augment``),
which append augmented tests after the task's own on each side. Every sample runs once on
the augmented task's tests; per sample that gives four verdicts: passes the original
visible, the augmented visible, the original hidden and the augmented hidden tests.

Rows, per sample set and ``visible_set`` (what the reward pays on):

- ``original``: the reward before augmentation (original visible tests only);
- ``original+augmented``: the reward after it (visible tests incl. augmented visible);
  a sample that passes the original visible tests but fails an augmented visible one is
  no longer paid;
- ``all_original``: control sets only; "passing_visible" here counts the samples that
  pass every original test (visible and hidden), and ``false_pass_after`` is the share of
  them that an augmented test kills.

``false_pass_before``: among the paid samples, the share failing an original hidden test;
``false_pass_after``: the share failing an original or an augmented hidden test.

Sample sets:

- ``humaneval_canonical`` / ``synthetic_reference``: the reference solutions (sanity:
  they should pass everything; a failure is a false fail of the augmented tests);
- ``humaneval_mutants`` / ``synthetic_mutants``: up to ``--mutants`` single-site mutants
  of each reference (``codeloop.data.repos.mutate``), drawn from mutants the augmenter
  did not use for its set cover (it takes the first ``max_mutants`` of its own shuffled
  list; these come from the rest), so they measure the augmented tests out of sample;
- ``humaneval_mutants_cover``: up to ``--mutants`` of the augmenter's own mutants (in
  sample, an optimistic figure; for comparison);
- ``synthetic_slips``: up to ``--slips`` wrong programs per generated task made by the
  generator's slip model (a wrong constant, a wrong op or a dropped step;
  ``codeloop.data.generator``), without ``wrong_solution``'s filter that keeps only
  slips failing a visible test. They stand in for model samples: no policy checkpoint
  or committed rollout with final code of regenerable tasks exists in the repository.

A test that a program died on (timeout, crash) stops its run; the tests after it are run
again in a new job, so every test has a verdict. Writes the table to ``--out`` (CSV).
"""

from __future__ import annotations

import argparse
import csv
import random
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from codeloop.config import load_params
from codeloop.config.data import AugmentConfig, SourceSpec
from codeloop.data import augment, generator
from codeloop.data.holdout import split_tests
from codeloop.data.loaders import load_source
from codeloop.sandbox import make_executor
from codeloop.sandbox.base import ExecJob
from codeloop.schema import Task

EVALPLUS_NOTE = (
    "For context (not measured here: EvalPlus data is not available offline): HumanEval+ "
    "adds about 80x more tests per task and lowers the published pass@1 of models by up "
    "to about 20-28%."
)
COLUMNS = (
    "sample_set",
    "visible_set",
    "tasks",
    "tasks_augmented",
    "tasks_aug_visible",
    "samples",
    "passing_visible",
    "false_pass_before",
    "false_pass_after",
    "n_false_pass_before",
    "n_false_pass_after",
)


# ---------------------------------------------------------------- pure rate computation


@dataclass(frozen=True)
class Verdict:
    """Whether one sample passes every test of each group of its task."""

    visible_orig: bool
    visible_aug: bool
    hidden_orig: bool
    hidden_aug: bool


def _share(k: int, n: int) -> float | None:
    return round(k / n, 4) if n else None


def false_pass(
    visible: list[bool], hidden_orig: list[bool], hidden_aug: list[bool]
) -> dict[str, int | float | None]:
    """Among the samples passing ``visible`` (the paid ones): how many, and the share
    failing the original hidden tests (before) or the original or augmented ones (after).
    Rates are None when no sample is paid."""
    if not len(visible) == len(hidden_orig) == len(hidden_aug):
        raise ValueError("one verdict per sample in each list")
    paid = [i for i, v in enumerate(visible) if v]
    before = sum(not hidden_orig[i] for i in paid)
    after = sum(not (hidden_orig[i] and hidden_aug[i]) for i in paid)
    return {
        "passing_visible": len(paid),
        "false_pass_before": _share(before, len(paid)),
        "false_pass_after": _share(after, len(paid)),
        "n_false_pass_before": before,
        "n_false_pass_after": after,
    }


def view_rates(verdicts: list[Verdict], control: bool) -> dict[str, dict]:
    """``false_pass`` under each reward view (see the module doc); ``all_original`` only
    for control sets: paid = passes every original test, so "after" is the share of
    those killed by an augmented test (visible or hidden)."""
    hid_o = [v.hidden_orig for v in verdicts]
    hid_a = [v.hidden_aug for v in verdicts]
    out = {
        "original": false_pass([v.visible_orig for v in verdicts], hid_o, hid_a),
        "original+augmented": false_pass(
            [v.visible_orig and v.visible_aug for v in verdicts], hid_o, hid_a
        ),
    }
    if control:
        out["all_original"] = false_pass(
            [v.visible_orig and v.hidden_orig for v in verdicts],
            hid_o,
            [v.visible_aug and v.hidden_aug for v in verdicts],
        )
    return out


# ---------------------------------------------------------------- samples


def _all_mutants(t: Task) -> list[str]:
    """Every distinct compiling single-site mutant of the reference, in the augmenter's
    order (it uses the first ``max_mutants``)."""
    return augment._mutants(t, 10**6)


def _pick(t: Task, pool: list[str], k: int, tag: str) -> list[str]:
    rng = random.Random(f"false-pass-{tag}:{t.task_id}")
    return [pool[i] for i in sorted(rng.sample(range(len(pool)), min(k, len(pool))))]


def _halves(t: Task, mutants: list[str]) -> tuple[list[str], list[str]]:
    """(the half the augmenter may see, the held-out half), by a hash of task and code."""
    ranked = sorted(mutants, key=lambda m: augment._rank("false-pass-split", t.task_id, m))
    held = set(ranked[1::2])
    return [m for m in mutants if m not in held], [m for m in mutants if m in held]


@contextmanager
def _augmenter_mutants(seen: dict[str, list[str]]):
    """Within the block, the augmenter scores its tests against ``seen[task_id]`` only."""
    orig = augment._mutants
    augment._mutants = lambda t, n: seen.get(t.task_id, [])[:n]
    try:
        yield
    finally:
        augment._mutants = orig


def _slips(t: Task, k: int) -> list[str]:
    """Up to k distinct wrong programs of a generated task, from the generator's slips."""
    parsed = generator._parse_chain(t)
    if parsed is None or not parsed[2]:
        return []
    head, arg, chain = parsed
    rng = random.Random(f"false-pass-slips:{t.task_id}")
    out: list[str] = []
    for _ in range(8 * k):
        wrong = generator._mutate(rng, chain)
        body = [f"    {op.code.format(a=arg, k=c)}" for op, c in wrong]
        code = "\n".join([head, *body, f"    return {arg}"]) + "\n"
        if code.strip() != t.reference_solution.strip() and code not in out:
            out.append(code)
        if len(out) == k:
            break
    return out


def _groups(t: Task) -> tuple[list[str], list[str], list[str], list[str]]:
    """(original visible, original hidden, augmented visible, augmented hidden) tests."""
    av, ah = t.metadata.get("augmented_visible", 0), t.metadata.get("augmented_hidden", 0)
    vis, hid = t.visible_tests, t.hidden_tests
    return vis[: len(vis) - av], hid[: len(hid) - ah], vis[len(vis) - av :], hid[len(hid) - ah :]


def _job(t: Task, code: str, tests: list[str], timeout_s: float) -> ExecJob:
    return ExecJob(
        code=code,
        tests=tests,
        entry_point=t.entry_point,
        setup_code=t.setup_code,
        timeout_s=timeout_s,
    )


def _passes(r, n: int) -> tuple[list[bool], int | None]:
    """Per test whether it passed, and the index of the test the program died on (the
    tests after it did not run and count as failed), if any."""
    seen = {tr.index: tr for tr in r.test_results}
    died = min((j for j, tr in seen.items() if tr.status in augment.DIED), default=None)
    passed = [j in seen and seen[j].passed and (died is None or j < died) for j in range(n)]
    return passed, died


def _verdicts(executor, samples: list[tuple[Task, str]], timeout_s: float) -> list[Verdict]:
    """One run per sample on its tests in the order original visible, original hidden,
    augmented visible, augmented hidden: a death (timeout, crash) in a group fails that
    group, and the verdicts of the groups after it matter in no view, except the augmented
    hidden tests after a death in the augmented visible ones (the "original" view still
    pays that sample): those run once more on their own."""
    groups = [_groups(t) for t, _ in samples]
    jobs = [
        _job(t, c, [x for g in gs for x in g], timeout_s)
        for (t, c), gs in zip(samples, groups, strict=True)
    ]
    out, again = [], []
    for i, (gs, job, r) in enumerate(zip(groups, jobs, executor.run_many(jobs), strict=True)):
        passed, died = _passes(r, len(job.tests))
        ends = [sum(len(g) for g in gs[: k + 1]) for k in range(4)]
        if died is not None and ends[1] <= died < ends[2] and gs[3]:
            again.append(i)
        out.append([all(passed[lo:hi]) for lo, hi in zip([0, *ends[:3]], ends, strict=True)])
    if again:
        reruns = [_job(samples[i][0], samples[i][1], groups[i][3], timeout_s) for i in again]
        for i, job, r in zip(again, reruns, executor.run_many(reruns), strict=True):
            out[i][3] = all(_passes(r, len(job.tests))[0])
    return [
        Verdict(visible_orig=v[0], hidden_orig=v[1], visible_aug=v[2], hidden_aug=v[3]) for v in out
    ]


def _rows(name: str, samples: list[tuple[Task, str]], verdicts: list[Verdict], control: bool):
    tasks = {t.task_id: t for t, _ in samples}
    n_aug = sum(
        t.metadata.get("augmented_visible", 0) + t.metadata.get("augmented_hidden", 0) > 0
        for t in tasks.values()
    )
    for view, rates in view_rates(verdicts, control).items():
        yield {
            "sample_set": name,
            "visible_set": view,
            "tasks": len(tasks),
            "tasks_augmented": n_aug,
            "tasks_aug_visible": sum(
                t.metadata.get("augmented_visible", 0) > 0 for t in tasks.values()
            ),
            "samples": len(samples),
            **rates,
        }


def _fmt(v) -> str:
    return "-" if v is None else str(v)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--humaneval", type=int, default=40, help="HumanEval tasks (first N)")
    ap.add_argument("--synthetic", type=int, default=200, help="generated tasks (first N)")
    ap.add_argument("--mutants", type=int, default=5, help="control mutants per task")
    ap.add_argument("--slips", type=int, default=4, help="generator slips per task")
    ap.add_argument("--timeout", type=float, default=1.0, help="seconds per sample run")
    ap.add_argument("--out", default="metrics/false_pass.csv")
    args = ap.parse_args()
    start = time.perf_counter()
    params = load_params(args.params)
    clean = params.clean
    acfg = getattr(clean, "augment", None) or AugmentConfig()
    acfg = acfg.model_copy(update={"enabled": True})
    synth_spec = next((s for s in clean.sources if s.kind == "synthetic"), None)
    he = load_source(SourceSpec(kind="humaneval"), None, "").tasks[: args.humaneval]
    syn = generator.generate_tasks(
        args.synthetic,
        synth_spec.seed if synth_spec else 0,
        synth_spec.max_depth if synth_spec else 3,
    )
    split = [split_tests(t, clean.visible_fraction, clean.min_visible) for t in [*he, *syn]]
    pools = {t.task_id: _all_mutants(t) for t in split}
    halves = {t.task_id: _halves(t, pools[t.task_id]) for t in split}
    n_cover, k = acfg.max_mutants, args.mutants
    executor = make_executor(params.sandbox)
    try:
        runs = clean.verify_runs
        augmented, _ = augment.augment_tasks(split, executor, acfg, runs)
        print(f"augmented (all mutants): {time.perf_counter() - start:.1f} s", flush=True)
        with _augmenter_mutants({tid: h[0] for tid, h in halves.items()}):
            half_aug, _ = augment.augment_tasks(split, executor, acfg, runs)
        print(f"augmented (half the mutants): {time.perf_counter() - start:.1f} s", flush=True)
        sets: list[tuple[str, list[tuple[Task, str]], bool]] = []
        for src, lo, hi in (("humaneval", 0, len(he)), ("synthetic", len(he), len(split))):
            prod, half = augmented[lo:hi], half_aug[lo:hi]
            ref = "canonical" if src == "humaneval" else "reference"
            sets += [
                (f"{src}_{ref}", [(t, t.reference_solution) for t in prod], False),
                (
                    f"{src}_mutants_heldout",
                    [(t, c) for t in prod for c in _pick(t, pools[t.task_id][n_cover:], k, "h")],
                    True,
                ),
                (
                    f"{src}_mutants_split",
                    [(t, c) for t in half for c in _pick(t, halves[t.task_id][1], k, "s")],
                    True,
                ),
                (
                    f"{src}_mutants_cover",
                    [(t, c) for t in prod for c in _pick(t, pools[t.task_id][:n_cover], k, "c")],
                    True,
                ),
            ]
        syn_prod = augmented[len(he) :]
        sets.append(
            ("synthetic_slips", [(t, c) for t in syn_prod for c in _slips(t, args.slips)], False)
        )
        flat = [s for _, samples, _ in sets for s in samples]
        verdicts = _verdicts(executor, flat, args.timeout)
        print(f"ran {len(flat)} samples: {time.perf_counter() - start:.1f} s", flush=True)
    finally:
        executor.close()
    rows, at = [], 0
    for name, samples, control in sets:
        vs = verdicts[at : at + len(samples)]
        at += len(samples)
        if not samples:
            print(f"{name}: no samples (no task has such mutants)")
            continue
        rows += list(_rows(name, samples, vs, control))
        if name in ("humaneval_canonical", "synthetic_reference"):
            bad = [
                t.task_id
                for (t, _), v in zip(samples, vs, strict=True)
                if not (v.visible_orig and v.visible_aug and v.hidden_orig and v.hidden_aug)
            ]
            print(
                f"sanity {name}: {len(bad)}/{len(samples)} references fail a test "
                f"(false-fail rate {_fmt(_share(len(bad), len(samples)))})"
                + (f": {', '.join(bad[:8])}" if bad else "")
            )
    print(
        f"augment config: max_mutants={acfg.max_mutants} max_tests={acfg.max_tests} "
        f"min_tests={acfg.min_tests} visible_share={acfg.visible_share}. Mutants: *_heldout "
        f"beyond the augmenter's first {acfg.max_mutants} (out of sample), *_split the half "
        f"of each task's mutants the augmenter was not shown in a second augmentation "
        f"(out of sample, rows judged on that augmentation), *_cover among the augmenter's "
        f"own (in sample). synthetic_slips: generator slips, not policy samples."
    )
    widths = [max(len(c), *(len(_fmt(r[c])) for r in rows)) for c in COLUMNS]
    print("  ".join(c.ljust(w) for c, w in zip(COLUMNS, widths, strict=True)))
    for r in rows:
        print("  ".join(_fmt(r[c]).ljust(w) for c, w in zip(COLUMNS, widths, strict=True)))
    print(EVALPLUS_NOTE)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        w.writerows(rows)
    print(f"wrote {out} ({time.perf_counter() - start:.1f} s)")


if __name__ == "__main__":
    main()
