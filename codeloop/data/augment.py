"""Test augmentation of function tasks: more tests, chosen to catch wrong code.

Thin tests let a reward pay for wrong programs (a model that hard-codes the few expected
outputs passes). For each function task with a reference solution:

1. candidate inputs come from the task's own call arguments by type-aware mutation and
   small random values of the same types (``codeloop.data.testinputs``);
2. the reference runs on every candidate in the sandbox, ``runs`` times: a candidate
   that raises, times out, returns something that cannot be written as a literal, or
   returns different values across runs is dropped; the others become
   ``assert f(args) == <value>`` tests (floats compare with the sandbox's tolerance);
3. single-site mutants of the reference (``codeloop.data.repos.mutate``) run against
   the original and the candidate tests; a greedy set cover keeps the fewest candidates
   that kill the mutants the original tests let live, capped at ``max_tests``, then edge
   tests ranked by hash up to ``min_tests`` (a departure from a pure minimal cover: a
   task whose own tests already kill every mutant still gets a few new inputs);
4. of the kept tests, a ``visible_share`` joins the visible tests (reward) and the rest
   the hidden tests (evaluation and the hacking alarm), by a hash of task id and test,
   appended after the task's own on each side; never the other way round.

Tasks with setup code (their asserts are judged whole, so no value comes back), stdio
tasks and tasks without calls of their entry point with literal arguments are left as
they are, with the reason in their report. ``tests_version`` hashes the configuration
and this code; it is stamped on every task, so changing either changes the dataset.
"""

from __future__ import annotations

import ast
import hashlib
import json
import random
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from codeloop.data import testinputs
from codeloop.data.repos import mutate
from codeloop.sandbox.base import ExecJob, ExecResult
from codeloop.sandbox.split import evaluate_check, plan_test
from codeloop.sandbox.values import values_equal
from codeloop.schema import Task

MAX_EXPECTED = 1000  # an expected value's literal is at most this long
DIED = ("timeout", "memory_limit", "crashed", "output_limit")
NO_AUGMENT = "none"  # tests_version of a dataset cleaned without augmentation


def tests_version(cfg) -> str:
    """sha256 prefix over the augmentation config and the code that applies it."""
    if not cfg.enabled:
        return NO_AUGMENT
    h = hashlib.sha256(json.dumps(cfg.model_dump(), sort_keys=True).encode())
    for path in (testinputs.__file__, mutate.__file__, __file__):
        h.update(Path(path).read_bytes())
    return h.hexdigest()[:16]


def _rank(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


@dataclass
class _Work:
    """One task's augmentation in progress."""

    task: Task
    calls: list[str] = field(default_factory=list)  # candidate call sources
    values: list[list[Any]] = field(default_factory=list)  # per candidate, per run
    tests: list[str] = field(default_factory=list)  # accepted candidate tests
    offered: list[str] = field(default_factory=list)  # model-written tests to vet
    model: list[str] = field(default_factory=list)  # of those, the ones the reference passes
    mutants: list[str] = field(default_factory=list)
    skipped: str = ""


def _skip_reason(t: Task) -> str:
    if t.io_style != "function":
        return "stdio"
    if not t.reference_solution.strip():
        return "no_reference"
    if t.setup_code.strip():
        return "setup_code"
    if not t.entry_point:
        return "no_entry_point"
    return ""


def _candidates(t: Task, cfg) -> list[str]:
    seen = [a for test in t.all_tests() for a in testinputs.calls_of(test, t.entry_point)]
    rng = random.Random(f"augment:{t.task_id}")
    cands = testinputs.candidate_inputs(seen, rng, cfg.n_random)
    if len(cands) > cfg.max_candidates:
        keep = sorted(rng.sample(range(len(cands)), cfg.max_candidates))
        cands = [cands[i] for i in keep]
    return [testinputs.call_source(t.entry_point, a) for a in cands]


def _mutants(t: Task, n: int) -> list[str]:
    try:
        found = mutate.find_mutations(t.reference_solution)
    except (SyntaxError, ValueError):
        return []
    rng = random.Random(f"augment-mutants:{t.task_id}")
    out: list[str] = []
    for m in rng.sample(found, len(found)):
        try:
            code = mutate.apply_mutation(t.reference_solution, m)
            compile(code, "<mutant>", "exec")  # compiling runs nothing
        except (SyntaxError, ValueError):
            continue
        if code not in out:
            out.append(code)
        if len(out) == n:
            break
    return out


def _probe_job(t: Task, calls: list[str]) -> ExecJob:
    # the check (== None) is irrelevant: the hole's value comes back either way
    return ExecJob(code=t.reference_solution, tests=[f"assert {c} == None" for c in calls],
                   entry_point=t.entry_point)


def _values(rs: list[ExecResult], n: int) -> list[list[Any]]:
    """Per call, the value of each run (``_MISSING`` where that run returned none)."""
    return [[r.test_results[i].value if _returned(r, i) else _MISSING for r in rs]
            for i in range(n)]


def _run_probes(executor, asks: list[tuple[Task, list[str]]], runs: int) -> list[list[list[Any]]]:
    jobs = [_probe_job(t, calls) for t, calls in asks for _ in range(runs)]
    results = executor.run_many(jobs) if jobs else []
    return [_values(results[i * runs : (i + 1) * runs], len(calls))
            for i, (_, calls) in enumerate(asks)]


def _probe(works: list[_Work], executor, runs: int) -> None:
    """Values of the reference on every candidate, ``runs`` times; a job that died part
    way (a candidate looped) is rerun once on the candidates after the one that killed it."""
    for w, vals in zip(works, _run_probes(executor, [(w.task, w.calls) for w in works], runs),
                       strict=True):
        w.values = vals
    retry = [(w, k) for w in works if (k := _first_missing(w.values)) is not None]
    asks = [(w.task, w.calls[k + 1 :]) for w, k in retry]
    for (w, k), vals in zip(retry, _run_probes(executor, asks, runs), strict=True):
        for i, v in enumerate(vals):
            if any(x is _MISSING for x in w.values[k + 1 + i]):
                w.values[k + 1 + i] = v


_MISSING = object()


def _returned(r: ExecResult, i: int) -> bool:
    if i >= len(r.test_results):
        return False
    tr = r.test_results[i]
    return tr.status in ("passed", "failed") and not tr.error_type and not tr.message


def _first_missing(values: list[list[Any]]) -> int | None:
    """Where a run died part way (its last call has no value): the first call some run
    has no value for, if any follow it; None otherwise (a call that raised is dropped)."""
    if not values or not any(v is _MISSING for v in values[-1]):
        return None
    first = next((i for i, vs in enumerate(values) if any(v is _MISSING for v in vs)), None)
    return first if first is not None and first + 1 < len(values) else None


def _as_test(call: str, values: list[Any], runs: int) -> str | None:
    """``assert call == <literal>`` when every run returned one equal, writable value."""
    if len(values) < runs or any(v is _MISSING for v in values):
        return None
    v = values[0]
    if any(type(x) is not type(v) or not values_equal(x, v) for x in values[1:]):
        return None  # nondeterministic
    literal = repr(v)
    if len(literal) > MAX_EXPECTED:
        return None
    test = f"assert {call} == {literal}"
    try:
        ast.parse(test)
        plan = plan_test(test)
        ok = plan.kind == "holes" and len(plan.holes) == 1 and evaluate_check(plan, [v])
    except Exception:  # a repr that does not read back as the same value is not a test
        return None
    return test if ok else None


def _reference_passes(works: list[_Work], executor, runs: int) -> None:
    """Keep the offered model tests the reference passes on every one of ``runs`` runs."""
    asks = [w for w in works if w.offered]
    jobs = [ExecJob(code=w.task.reference_solution, tests=list(w.offered),
                    entry_point=w.task.entry_point) for w in asks for _ in range(runs)]
    results = executor.run_many(jobs) if jobs else []
    for k, w in enumerate(asks):
        rs = results[k * runs : (k + 1) * runs]
        w.model = [s for i, s in enumerate(w.offered)
                   if all(i < len(r.test_results) and r.test_results[i].passed for r in rs)]


def _kills(works: list[_Work], executor) -> dict[int, list[list[bool]]]:
    """Per work: for each mutant, for each test (own tests, then candidates) whether it
    killed the mutant; tests after the one a dying mutant stopped at are not credited."""
    jobs = []
    for w in works:
        tests = [*w.task.all_tests(), *w.tests, *w.model]
        jobs += [(w, ExecJob(code=m, tests=tests, entry_point=w.task.entry_point))
                 for m in w.mutants]
    results = executor.run_many([j for _, j in jobs]) if jobs else []
    out: dict[int, list[list[bool]]] = {id(w): [] for w in works}
    for (w, job), r in zip(jobs, results, strict=True):
        row = [False] * len(job.tests)
        for i, tr in enumerate(r.test_results):
            if tr.passed:
                continue
            row[i] = True
            if tr.status in DIED:
                break  # what follows a mutant's death says nothing of those tests
        out[id(w)].append(row)
    return out


def _cover(w: _Work, matrix: list[list[bool]], cfg) -> tuple[list[str], dict[str, Any]]:
    """The kept candidate tests (set cover, then hash-ranked fill) and the task's figures."""
    n_own = len(w.task.all_tests())
    n_vis = len(w.task.visible_tests)
    own_killed = {m for m, row in enumerate(matrix) if any(row[:n_own])}
    vis_killed = {m for m, row in enumerate(matrix) if any(row[:n_vis])}
    live = set(range(len(matrix))) - own_killed
    chosen: list[int] = []
    order = sorted(range(len(w.tests)), key=lambda j: _rank(w.task.task_id, w.tests[j]))
    while live and len(chosen) < cfg.max_tests:
        gain = {j: sum(matrix[m][n_own + j] for m in live) for j in order if j not in chosen}
        best = max(gain, key=lambda j: gain[j], default=None)
        if best is None or gain[best] == 0:
            break
        chosen.append(best)
        live = {m for m in live if not matrix[m][n_own + best]}
    target = min(cfg.max_tests, max(cfg.min_tests, len(chosen)))
    for j in order:
        if len(chosen) >= target:
            break
        if j not in chosen:
            chosen.append(j)
    n_cand = len(w.tests)
    killed_after = {m for m, row in enumerate(matrix)
                    if any(row[:n_own]) or any(row[n_own + j] for j in chosen)
                    or any(row[n_own + n_cand:])}
    n = len(matrix)
    figures = {
        "mutants": n,
        "mutation_score_before": round(len(own_killed) / n, 4) if n else None,
        "mutation_score_after": round(len(killed_after) / n, 4) if n else None,
        "visible_mutation_score_before": round(len(vis_killed) / n, 4) if n else None,
        "candidates": len(w.calls),
        "accepted": len(w.tests),
    }
    n_cand = len(w.tests)
    trusted = [s for j, s in enumerate(w.model)
               if any(row[n_own + n_cand + j] for row in matrix)]
    figures["model_tests_offered"] = len(w.offered)
    figures["model_tests_kept"] = len(trusted)
    return [w.tests[j] for j in chosen], trusted, figures


def _placed(t: Task, kept: list[str], share: float, trusted: list[str]) -> Task:
    """Kept tests split by ``share``; vetted model tests are hidden only."""
    k = round(share * len(kept))
    ranked = sorted(kept, key=lambda s: _rank("visible", t.task_id, s))
    visible = set(ranked[:k])
    vis = [s for s in kept if s in visible]
    hid = [s for s in kept if s not in visible]
    hid += [s for s in trusted if s not in hid and s not in t.all_tests()]
    meta = {**t.metadata, "augmented_visible": len(vis), "augmented_hidden": len(hid)}
    return replace(t, visible_tests=[*t.visible_tests, *vis],
                   hidden_tests=[*t.hidden_tests, *hid], metadata=meta)


def augment_tasks(tasks: list[Task], executor, cfg, runs: int,
                  model_tests: dict[str, list[str]] | None = None) -> tuple[list[Task], list[dict]]:
    """Augmented copies of ``tasks`` (input order) and one report row per task.

    ``model_tests``: tests a model wrote, by task id (a judge model's, or a tdd episode's);
    never trusted as they are: one joins the hidden tests only if the reference passes it
    on every run and it fails at least one mutant of the reference.

    ``runs``: sandbox runs of the reference per candidate (at least 2, so a value that
    changes between runs is seen). Each task's metadata gains ``tests_version`` and, for
    augmented tasks, ``augmented_visible``/``augmented_hidden`` (how many of the last
    visible/hidden tests are augmented) and ``test_quality`` (the report row's figures).
    """
    version = tests_version(cfg)
    runs = max(2, runs)
    works = [_Work(t) for t in tasks]
    for w in works:
        w.skipped = "disabled" if not cfg.enabled else _skip_reason(w.task)
        if not w.skipped:
            w.calls = _candidates(w.task, cfg)
            w.offered = list((model_tests or {}).get(w.task.task_id, []))
            w.skipped = "" if w.calls or w.offered else "no_literal_calls"
    live = [w for w in works if not w.skipped]
    _probe(live, executor, runs)
    _reference_passes(live, executor, runs)
    for w in live:
        w.tests = [t for c, vs in zip(w.calls, w.values, strict=True)
                   if (t := _as_test(c, vs, runs)) is not None]
        w.mutants = _mutants(w.task, cfg.max_mutants)
    matrices = _kills(live, executor)
    out, rows = [], []
    for w in works:
        t = w.task
        row: dict[str, Any] = {"task_id": t.task_id, "source": t.source,
                               "tests_before": len(t.all_tests()), "skipped": w.skipped}
        if not w.skipped:
            kept, trusted, figures = _cover(w, matrices[id(w)], cfg)
            t = _placed(t, kept, cfg.visible_share, trusted)
            row.update(figures)
            row["weak"] = (figures["mutation_score_after"] is not None
                           and figures["mutation_score_after"] < cfg.weak_mutation_score)
            t.metadata["test_quality"] = {k: v for k, v in row.items() if k != "task_id"}
        row["tests_after"] = len(t.all_tests())
        out.append(replace(t, metadata={**t.metadata, "tests_version": version}))
        rows.append(row)
    return out, rows


def _mean(xs: list) -> float | None:
    xs = [x for x in xs if x is not None]
    return round(sum(xs) / len(xs), 4) if xs else None


QUALITY_FIGURES = ("tests_before", "tests_after", "mutation_score_before",
                   "mutation_score_after", "visible_mutation_score_before",
                   "statements_own", "statements_visible", "statements_all",
                   "branches_own", "branches_visible", "branches_all")


def quality_summary(rows: list[dict]) -> dict[str, dict[str, Any]]:
    """Per source (and "all"): tasks, augmented, weak, skipped by reason, and the mean of
    each figure of QUALITY_FIGURES over the rows that have it."""
    by: dict[str, list[dict]] = {}
    for r in rows:
        by.setdefault(r["source"], []).append(r)
    if rows:
        by["all"] = rows
    out = {}
    for src, rs in sorted(by.items()):
        skipped: dict[str, int] = {}
        for r in rs:
            if r["skipped"]:
                skipped[r["skipped"]] = skipped.get(r["skipped"], 0) + 1
        row = {"tasks": len(rs), "augmented": sum(not r["skipped"] for r in rs),
               "weak": sum(bool(r.get("weak")) for r in rs),
               "dropped": sum(bool(r.get("dropped")) for r in rs), "skipped": skipped}
        row.update({f"mean_{k}": _mean([r.get(k) for r in rs]) for k in QUALITY_FIGURES})
        out[src] = row
    return out


def load_model_tests(path: str) -> tuple[dict[str, list[str]], list[dict]]:
    """Model-written tests by task id from a JSONL file, and quarantine rows (file, row,
    field, reason) for the lines that are not ``{"task_id": str, "tests": [str, ...]}``."""
    tests: dict[str, list[str]] = {}
    bad: list[dict] = []
    if not path:
        return tests, bad
    for n, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as exc:
            bad.append({"file": path, "row": n, "field": "", "reason": f"bad JSON: {exc}"})
            continue
        problem = _model_row_problem(row)
        if problem:
            bad.append({"file": path, "row": n, "field": problem[0], "reason": problem[1]})
            continue
        tests.setdefault(row["task_id"], []).extend(row["tests"])
    return tests, bad


def _model_row_problem(row: Any) -> tuple[str, str] | None:
    if not isinstance(row, dict):
        return "", "a row must be a JSON object"
    if not isinstance(row.get("task_id"), str) or not row["task_id"]:
        return "task_id", "missing or not a non-empty string"
    tests = row.get("tests")
    if not isinstance(tests, list) or not all(isinstance(x, str) for x in tests):
        return "tests", "missing or not a list of strings"
    return None
