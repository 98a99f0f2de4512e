"""Run pytest on a workspace inside the sealed sandbox and read its outcomes.

``python3 -m pytest`` runs as a command job (codeloop.sandbox.cmdjobs) in the workspace,
with the env dirs (pytest, our plugin, the task's own) read-only on PYTHONPATH. Outcomes
come from our plugin's JSON lines on the result fd (pytest_plugin.py), never from pytest's
stdout, which the code under test can print anything to; stdout is kept only as a tail
for the agent to read. ``parse_outcomes`` is the one reader of that channel, so the judge
can swap in a stronger channel without touching the callers.

``run_batched`` runs several pytest sessions in one command (one interpreter and pytest
start-up for all, a forked run per tree): for trees of ours only (clean's executability
filter, mint's candidates), since a run's code could write another run's lines; agent
episodes and the judge keep one command per run.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

from codeloop.agent.envdirs import PLUGIN_NAME
from codeloop.sandbox.base import CmdJob, CmdResult
from codeloop.sandbox.cmdjobs import image_env

OUTCOMES = ("passed", "failed", "error", "skipped", "xfailed", "xpassed")
TAIL = 4000  # chars of pytest's own output kept for the agent


@dataclass
class TestReport:
    __test__ = False  # not a pytest test class

    outcomes: dict[str, str] = field(default_factory=dict)  # node id -> one of OUTCOMES
    collected_ok: bool = False
    first_failure: str = ""  # the first failure's assertion and traceback tail
    duration_ms: float = 0.0
    output_tail: str = ""
    exit_code: int | None = None
    status: str = ""  # the command's status (exited, timeout, output_limit, ...)

    def count(self, outcome: str) -> int:
        return sum(1 for v in self.outcomes.values() if v == outcome)


def pytest_argv(node_ids: list[str] | None) -> list[str]:
    """The command line; node ids go after ``--`` so none can be read as an option."""
    argv = ["python3", "-B", "-m", "pytest", "-p", PLUGIN_NAME, "-p", "no:cacheprovider",
            "-q", "--tb=short", "--rootdir=.", "-o", "console_output_style=classic"]
    return argv + ["--", *node_ids] if node_ids else argv


def _outcome(msg: dict) -> str:
    when, outcome = msg.get("when"), msg.get("outcome")
    if when in ("setup", "teardown"):
        return "error" if outcome == "failed" else ("skipped" if outcome == "skipped" else "")
    if msg.get("xfail"):
        return "xfailed" if outcome == "skipped" else "xpassed"
    return outcome if outcome in ("passed", "failed", "skipped") else ""


def parse_outcomes(text: str) -> tuple[dict[str, str], bool, str]:
    """(outcomes, collected_ok, first failure) from the plugin's lines. A setup or teardown
    failure makes the test an ``error``; a collection error clears ``collected_ok``."""
    outcomes: dict[str, str] = {}
    first, collect_ok, finished = "", True, False
    for line in text.splitlines():
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        if not isinstance(msg, dict):
            continue
        if "exitstatus" in msg:
            finished = True
            collect_ok = collect_ok and msg.get("exitstatus") in (0, 1, 5)
            continue
        if "collect" in msg:
            collect_ok = False
            first = first or str(msg.get("longrepr", ""))
            continue
        node, got = str(msg.get("nodeid", "")), _outcome(msg)
        if not node or not got:
            continue
        if node not in outcomes or got == "error":  # a teardown error overrides the call
            outcomes[node] = got
        if got in ("failed", "error") and not first:
            first = str(msg.get("longrepr", ""))
    return outcomes, collect_ok and finished, first


def test_job(
    workspace_path: str, node_ids: list[str] | None, env_inside: list[str], timeout_s: float
) -> CmdJob:
    """The command job running ``node_ids`` (None: pytest's own discovery) in a workspace."""
    env = {"PYTHONPATH": ":".join(env_inside), "PYTHONDONTWRITEBYTECODE": "1",
           "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTHONHASHSEED": "0"}
    return CmdJob(argv=pytest_argv(node_ids), cwd_host=workspace_path, timeout_s=timeout_s, env=env,
                  image_env=image_env(env_inside))


def report_of(res: CmdResult) -> TestReport:
    """A TestReport from a finished test command."""
    outcomes, ok, first = parse_outcomes(res.results)
    tail = (res.stdout + res.stderr)[-TAIL:]
    return TestReport(outcomes=outcomes, collected_ok=ok and res.status == "exited",
                      first_failure=first[-TAIL:], duration_ms=res.duration_ms, output_tail=tail,
                      exit_code=res.exit_code, status=res.status)


@dataclass
class SealedRun:
    """One agent test run through the sealed entry (judge_boot): what its records must match."""

    nonce: str
    ids: list[str]  # requested: the selection and the canaries
    own: list[str]  # the selection
    planted: object  # canaries.Planted
    spec: str  # host path of the spec file (the entry unlinks it)


def sealed_test_job(ws_path: str, base: str, node_ids: list[str], boot_inside: str,
                    env_inside: list[str], timeout_s: float) -> tuple[CmdJob, SealedRun]:
    """An agent's run_tests as the judge runs its tests: the sealed entry (pinned test
    modules, counted nonce'd records, the audit-hook guard, plugin autoload pinned) and
    canaries planted in memory only (the workspace's files are never changed)."""
    import random
    import secrets

    from codeloop.agent import canaries, hacks
    from codeloop.agent.fsops import ToolError, read_bytes

    files = {}
    for rel in dict.fromkeys(n.split("::", 1)[0] for n in node_ids):
        try:
            files[rel] = read_bytes(ws_path, rel, 1 << 24)
        except (ToolError, OSError):
            continue  # a missing test file: pytest says so
    planted = canaries.plant(files, node_ids, random.Random(secrets.randbits(64)), max_mutants=4)
    if set(node_ids) & {*planted.must_fail, *planted.must_pass}:
        planted = canaries.Planted()
    run = SealedRun(secrets.token_hex(16), [*node_ids, *planted.must_fail, *planted.must_pass],
                    list(node_ids), planted,
                    os.path.join(ws_path, f".codeloop-run-{secrets.token_hex(8)}.json"))
    changed = hacks.tree_check(base, ws_path).changed if base else []
    spec = {"nonce": run.nonce, "paths": env_inside, "ids": run.ids, "changed": changed,
            "args": ["-q", "--tb=short", "-p", "no:cacheprovider", "--rootdir=.",
                     "-o", "console_output_style=classic", "--"], "detail": True,
            "overrides": {r: d.decode("utf-8", "replace") for r, d in planted.files.items()}}
    with open(run.spec, "w", encoding="utf-8") as fh:
        json.dump(spec, fh)
    from codeloop.sandbox.pool import child_python

    job = CmdJob(argv=[child_python(), "-I", "-B", boot_inside, os.path.basename(run.spec)],
                 cwd_host=ws_path, timeout_s=timeout_s, result_cap=16 << 20,
                 image_env=image_env(env_inside))
    return job, run


def sealed_report(res: CmdResult, run: SealedRun) -> TestReport:
    """The agent's TestReport of a sealed run: outcomes of its selection in the order they
    ran; nothing passes in a run whose records do not add up or whose canaries were fooled."""
    from codeloop.agent import canaries
    from codeloop.agent.channel import read_channel
    from codeloop.agent.fsops import remove_path

    remove_path(os.path.dirname(run.spec), os.path.basename(run.spec))  # if never started
    code = res.exit_code if res.status == "exited" else None
    rep = read_channel(res.results, run.nonce, run.ids, code, timed_out=res.timed_out)
    tail = (res.stdout + res.stderr)[-TAIL:]
    out = TestReport(duration_ms=res.duration_ms, output_tail=tail, exit_code=res.exit_code,
                     status=res.status, collected_ok=rep.collected_ok and rep.finished)
    if not rep.trusted or canaries.forged(run.planted, rep.outcomes):
        out.collected_ok = False
        out.first_failure = "the test run was not trusted: " + "; ".join(rep.problems)[:TAIL]
        return out
    own = set(run.own)
    for node in [*rep.order, *run.own]:
        if node in own and node not in out.outcomes and rep.outcomes.get(node) in OUTCOMES:
            out.outcomes[node] = rep.outcomes[node]
    failed = [rep.details[n] for n in rep.order if n in own and n in rep.details]
    out.first_failure = ([*rep.collect_errors, *failed] or [""])[0][-TAIL:]
    out.collected_ok = out.collected_ok and not rep.collect_errors
    return out


def run_pytest_many(executor, runs: list[tuple[str, list[str] | None]], env_paths: list[str],
                    timeout_s: float) -> list[TestReport]:
    """Run several (workspace path, node ids) at once, one sandbox batch; reports in order."""
    inside = [executor.workspaces.env_inside(p) for p in env_paths]
    jobs = [test_job(path, ids, inside, timeout_s) for path, ids in runs]
    return [report_of(r) for r in executor.run_commands(jobs)]


def run_pytest(executor, workspace, node_ids: list[str] | None = None,
               env_paths: list[str] = (), timeout_s: float = 60.0) -> TestReport:
    """Run ``node_ids`` (None: every test pytest finds) of ``workspace`` (a Workspace or its
    host path) in the sealed sandbox; ``env_paths``: host env dirs (envs.env_paths)."""
    path = getattr(workspace, "path", workspace)
    return run_pytest_many(executor, [(path, node_ids)], list(env_paths), timeout_s)[0]


BATCH_SPEC = ".codeloop-batch.json"  # in the job's workspace root; the driver unlinks it


def batch_job(ws_path: str, runs: list[tuple[str, list[str] | None]], env_inside: list[str],
              timeout_s: float) -> CmdJob:
    """One command running several pytest sessions with one interpreter and pytest start-up
    (pytest_plugin.batch): each (subdir of ``ws_path``, node ids) is a forked run with its
    own ``timeout_s``. For trees of ours only (a run could forge another's lines)."""
    argv = pytest_argv(None)[4:]
    i = argv.index(PLUGIN_NAME)
    del argv[i - 1 : i + 1]  # the driver passes the plugin module itself (imported already)
    spec = {"argv": argv, "timeout": timeout_s,
            "runs": [{"dir": d, "ids": ids, "out": f".codeloop-out-{i}"}
                     for i, (d, ids) in enumerate(runs)]}
    with open(os.path.join(ws_path, BATCH_SPEC), "w") as fh:
        json.dump(spec, fh)
    job = test_job(ws_path, None, env_inside, timeout_s * len(runs) + 10.0)
    code = f"import {PLUGIN_NAME} as m; m.batch({BATCH_SPEC!r})"
    job.argv = ["python3", "-B", "-c", code]
    job.result_cap = 16 << 20  # many runs' outcome lines
    return job


def _tail(ws_path: str, i: int) -> str:
    path = os.path.join(ws_path, f".codeloop-out-{i}")
    try:
        with open(path, "rb") as fh:
            fh.seek(max(0, os.path.getsize(path) - TAIL))
            return fh.read().decode("utf-8", "replace")
    except OSError:
        return ""
    finally:
        if os.path.lexists(path):
            os.unlink(path)


def batch_reports(res: CmdResult, ws_path: str, n: int) -> list[TestReport]:
    """Each run's TestReport from a finished batch command. A run the batch never finished
    (the command was killed or timed out) gets the command's status and no outcomes."""
    lines: list[list[str]] = [[] for _ in range(n)]
    ends: dict[int, dict] = {}
    for line in res.results.splitlines():
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        run = msg.get("run") if isinstance(msg, dict) else None
        if not isinstance(run, int) or not 0 <= run < n:
            continue
        if "exit" in msg or "timeout" in msg:
            ends.setdefault(run, msg)
        elif run not in ends:
            lines[run].append(line)
    out = []
    for i in range(n):
        outcomes, ok, first = parse_outcomes("\n".join(lines[i]))
        end = ends.get(i)
        status = (res.status if res.status != "exited" else "killed") if end is None else (
            "timeout" if end.get("timeout") else "exited")
        code = end.get("exit") if end else None
        out.append(TestReport(outcomes=outcomes, collected_ok=ok and status == "exited",
                              first_failure=first[-TAIL:], duration_ms=float((end or {}).get("wall_ms", 0.0)),
                              output_tail=_tail(ws_path, i), exit_code=code, status=status))
    return out


def run_batched(executor, batches: list[tuple[str, list[tuple[str, list[str] | None]]]],
                env_paths: list[str], timeout_s: float) -> list[list[TestReport]]:
    """Run batches ``(workspace path, [(subdir, node ids), ...])``, one command each, all at
    once over the executor's workers; each batch's reports in order."""
    inside = [executor.workspaces.env_inside(p) for p in env_paths]
    jobs = [batch_job(ws, runs, inside, timeout_s) for ws, runs in batches]
    results = executor.run_commands(jobs)
    return [batch_reports(r, ws, len(runs)) for r, (ws, runs) in zip(results, batches, strict=True)]
