"""`codeloop exec` on repository tasks: SWE-bench-format predictions, judged in the sandbox.

    codeloop exec --tasks TASKS --samples PREDICTIONS --out RESULTS [--repos DIR] [--envs DIR]

TASKS: codeloop repository task rows (``kind: repo``; tasks.parquet or json/jsonl), or
the same tasks as SWE-bench instances (``instances.jsonl`` of ``codeloop mint`` or
``codeloop export --format swebench``: their ``base_commit`` is the snapshot).
PREDICTIONS: SWE-bench's prediction format, jsonl rows or one JSON list of
``{"instance_id", "model_patch", "model_name_or_path"}`` (a null patch is the empty one).
Snapshots are read from ``--repos`` (default: ``repos/`` beside TASKS, as the clean stage
writes them) and test environments from ``--envs`` (default: ``envs/`` beside TASKS, or a
fresh temporary dir holding only pytest). RESULTS: one row per prediction, in input order:
``resolved`` (F2P, P2P and the hidden tests all passed, no disqualifying flag),
``visible_resolved`` (F2P and P2P only: what a reward reads), F2P/P2P/hidden pass counts,
``hack_flags``, ``canaries``, whether the patch applied. Beside it the SWE-bench harness's
run report (``--report``, default RESULTS' name with ``.report.json``: resolved,
unresolved, empty-patch and error ids with their counts; codeloop.evaluate.harness_report).
A patch the judge refuses (over ``max_patch_bytes``: ``patch_too_large``) or cannot
handle (``judge_error``, with the reason) is that row's verdict, never the batch's end.
A prediction for a task that is not a usable repository task gets ``status:
task_rejected`` with the reason. Exit codes as for function tasks (exec_cmd): 0, 2 for
unusable input (or ``--strict`` with a rejected task), 3 for a sandbox failure.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from codeloop.data.repos.swebench_rows import from_swebench
from codeloop.evaluate.harness_report import harness_report
from codeloop.schema import Task


class InputError(ValueError):
    """Unusable input; the message names the file, line and field."""


def is_prediction_file(path: str) -> bool:
    """Whether ``path`` holds SWE-bench predictions (its first row has model_patch)."""
    try:
        with open(path, encoding="utf-8") as fh:
            head = fh.read(1 << 16).lstrip()
    except OSError:
        return False
    if head.startswith("["):
        head = head[1:].lstrip()
    first = head.split("\n", 1)[0]
    return '"model_patch"' in first or ('"instance_id"' in first and '"completion"' not in first)


def load_predictions(path: str) -> list[dict]:
    """Prediction rows (jsonl or a JSON list); InputError naming file:row and field."""
    text = Path(path).read_text(encoding="utf-8")
    if text.lstrip().startswith("["):
        try:
            rows = list(enumerate(json.loads(text), start=1))
        except ValueError as exc:
            raise InputError(f"{path}: not valid JSON: {exc}") from None
    else:
        rows = []
        for n, line in enumerate(text.splitlines(), start=1):
            if line.strip():
                try:
                    rows.append((n, json.loads(line)))
                except ValueError as exc:
                    raise InputError(f"{path}:{n}: not valid JSON: {exc}") from None
    out = []
    for n, row in rows:
        if not isinstance(row, dict):
            raise InputError(f"{path}:{n}: a row must be a JSON object")
        if not isinstance(row.get("instance_id"), str):
            raise InputError(f"{path}:{n}: field 'instance_id': missing or not a string")
        patch = row.get("model_patch")
        if patch is not None and not isinstance(patch, str):
            raise InputError(f"{path}:{n}: field 'model_patch': not a string")
        out.append({**row, "model_patch": patch or "", "_line": n})
    return out


def task_problem(task: Task) -> str:
    """Why a row cannot be judged as a repository task ('' when it can)."""
    if task.kind != "repo":
        return f"kind {task.kind!r} is not 'repo'"
    if not task.snapshot:
        return "no snapshot"
    if not task.fail_to_pass:
        return "no FAIL_TO_PASS tests"
    return ""


def load_repo_tasks(path: str) -> tuple[dict[str, Task], dict[str, str]]:
    """(instance_id -> Task, instance_id -> why rejected)."""
    from codeloop.data.validate import SourceError, iter_records

    tasks, rejected = {}, {}
    try:
        for row, rec, _ in iter_records(path, "canonical"):
            if rec is None:
                continue
            swebench = "task_id" not in rec and "instance_id" in rec
            try:
                task = from_swebench(rec) if swebench else Task.from_row(rec)
            except (TypeError, ValueError) as exc:
                key = rec.get("instance_id" if swebench else "task_id")
                rejected[str(key)] = f"row {row}: not a task row: {exc}"
                continue
            problem = task_problem(task)
            if problem:
                rejected[task.task_id] = f"row {row}: {problem}"
            else:
                tasks[task.task_id] = task
    except SourceError as exc:
        raise InputError(str(exc)) from None
    return tasks, rejected


def verdict_row(pred: dict, v) -> dict:
    detail = (v.apply_error if not v.applied and v.apply_error else "; ".join(v.problems))[:300]
    return {"instance_id": pred["instance_id"], "model_name_or_path": pred.get("model_name_or_path", ""),
            "resolved": v.resolved, "visible_resolved": v.visible_resolved,
            "applied": v.applied, "status": v.status or "not_applied", "canaries": v.canaries,
            "f2p_passed": v.f2p_passed, "f2p_total": v.f2p_total, "p2p_passed": v.p2p_passed,
            "p2p_total": v.p2p_total, "hidden_passed": v.hidden_passed,
            "hidden_total": v.hidden_total, "hack_flags": v.hack_flags, "dropped": v.dropped,
            "duration_ms": v.duration_ms, "detail": detail}


def rejected_row(pred: dict, reason: str) -> dict:
    return {"instance_id": pred["instance_id"], "model_name_or_path": pred.get("model_name_or_path", ""),
            "resolved": False, "applied": False, "status": "task_rejected", "hack_flags": [],
            "detail": f"task rejected: {reason}"}


def report_path(args) -> Path:
    """``--report``, or RESULTS' name with ``.report.json`` (results.jsonl ->
    results.report.json): beside the results, never over a mint or clean report.json."""
    given = getattr(args, "report", None)
    if given:
        Path(given).parent.mkdir(parents=True, exist_ok=True)
        return Path(given)
    out = Path(args.out)
    return out.with_name(out.stem + ".report.json")


def _dirs(args) -> tuple[str, str, str | None]:
    """(repos dir, envs root, temp dir to remove or None)."""
    beside = Path(args.tasks).resolve().parent
    repos = getattr(args, "repos", None) or str(beside / "repos")
    envs = getattr(args, "envs", None) or (
        str(beside / "envs") if (beside / "envs").is_dir() else None
    )
    if envs:
        return repos, envs, None
    tmp = tempfile.mkdtemp(prefix="codeloop-exec-envs-")
    os.chmod(tmp, 0o755)
    return repos, tmp, tmp


def _judge_all(preds, tasks, rejected, repos, envs, cfg, timeout) -> list[dict]:
    from codeloop.agent.executor import open_executor
    from codeloop.agent.judge import JudgeConfig, judge_many
    from codeloop.config import AgentConfig
    from codeloop.sandbox import require_met

    ex = open_executor(cfg, AgentConfig(), [], envs_dir=envs, workspaces=True)
    try:
        require_met(ex, cfg)
        jcfg = JudgeConfig(timeout_s=timeout or JudgeConfig.timeout_s)
        todo = [p for p in preds if p["instance_id"] in tasks]
        items = [(tasks[p["instance_id"]], p["model_patch"]) for p in todo]
        verdicts = {id(p): v for p, v in zip(todo, judge_many(items, repos, ex, jcfg), strict=True)}
    finally:
        ex.close()
    return [verdict_row(p, verdicts[id(p)]) if id(p) in verdicts
            else rejected_row(p, rejected[p["instance_id"]]) for p in preds]


def run(args, cfg) -> int:
    """The repository branch of `codeloop exec` (cfg: the resolved SandboxConfig)."""
    from codeloop.agent.patches import PatchError
    from codeloop.sandbox import SandboxError

    try:
        preds = load_predictions(args.samples)
        tasks, rejected = load_repo_tasks(args.tasks)
        for p in preds:
            if p["instance_id"] not in tasks and p["instance_id"] not in rejected:
                raise InputError(f"{args.samples}:{p['_line']}: field 'instance_id': unknown task "
                                 f"{p['instance_id']!r}")
    except (InputError, OSError) as exc:
        print(f"codeloop exec: {exc}", file=sys.stderr)
        return 2
    repos, envs, tmp = _dirs(args)
    try:
        rows = _judge_all(preds, tasks, rejected, repos, envs, cfg, args.timeout)
    except (SandboxError, FileNotFoundError, PatchError) as exc:
        print(f"codeloop exec: failure of ours or of a task, not a verdict: {exc}", file=sys.stderr)
        return 3
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    report = report_path(args)
    report.write_text(json.dumps(harness_report(preds, rows, [*tasks, *rejected]), indent=2)
                      + "\n", encoding="utf-8")
    resolved = sum(bool(r["resolved"]) for r in rows)
    n_rej = sum(r["status"] == "task_rejected" for r in rows)
    n_err = sum(r["status"] in ("judge_error", "patch_too_large") for r in rows)
    print(f"judged {len(rows) - n_rej} predictions: {resolved} resolved -> {out} (report: "
          f"{report})", file=sys.stderr)
    if n_err:
        print(f"{args.samples}: {n_err} prediction(s) the judge refused or could not handle "
              "(status judge_error / patch_too_large: not resolved)", file=sys.stderr)
    if n_rej:
        print(f"{args.tasks}: {n_rej} prediction(s) of rejected tasks: " + "; ".join(
            sorted({f'{k}: {v}' for k, v in rejected.items()})[:10]), file=sys.stderr)
    return 2 if n_rej and args.strict else 0
