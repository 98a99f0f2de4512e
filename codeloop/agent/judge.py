"""Judge a repository task's final diff: fresh tree, test files restored, tests in the sandbox.

Scoring is never the agent's word. ``judge_many`` builds, per patch, a fresh tree (the
task's snapshot, ``bug_patch``, ``test_patch``, hidden test files *kept*), applies the model
patch with every protected file section dropped (test files, conftest, pytest
configuration, start-up hooks: ``is_test_path`` and hacks.is_protected) and flagged, checks
that every test file is byte for byte the task's version (restoring and flagging if not),
and runs FAIL_TO_PASS, PASS_TO_PASS and the hidden tests with one sealed pytest command.
``resolved``: the patch applied, every F2P and every P2P test passed, no disqualifying flag.
A patch that does not apply is a result (``applied=False``); our own failures (sandbox
fault, missing snapshot, a task whose own patches do not apply) raise.

The verdict channel, and what it cannot do. pytest runs the tree's code in the process
that decides the outcomes, so the channel is built to make forgery *visible*:

- the run's spec (nonce, node ids) is a file the entry point reads and unlinks before any
  code of the tree runs; the nonce is never in argv, the environment or on disk after;
- records go to a result fd taken over (dup'd, the original closed) before collection;
  stdout and the exit status alone prove nothing;
- the host (channel.py) counts: one start, one ``collected`` equal to the requested ids,
  setup/call/teardown of each test exactly once, contiguous sequence numbers, one pid (a
  forked child's records carry its own), nothing after ``finish``, whose record count and
  exit status must match the process's real exit. A blind write (every fd, fake PASSED
  lines on stdout), an early ``os._exit(0)``, ``sys.exit`` at import, a killed parent or a
  forked reporter leave something missing, doubled or foreign: nothing passes;
- the entry point records the identity of pytest's outcome machinery (runner, reports,
  skipping, assertion rewriting, pluggy's call loop, ``builtins.__import__``/``exec``,
  ``os._exit``/``os.write``), checks it at every report together with the origin of every
  implementation of the outcome hooks (pytest, our plugin, a conftest, an env dir), trace
  and profile hooks and the import hooks' order: any change is ``harness_tampered``.

Residual limit, stated plainly: code in the same process can, in principle, read the nonce
from memory, rebuild the watched objects' identities, or write well-formed records under
the right pid. Every route we know to that needs what the static flags disqualify
(``_pytest``/pytest imports, ``sys.modules``, ``gc``, frames and tracebacks, ``builtins``,
``ctypes``, ``fork``, import hooks, ``__import__``/``importlib``/``exec``/``eval``,
``__subclasses__``/``__globals__``, ``os.dup2``, ``/proc/self/mem``), so such a patch is not
``resolved`` even when its forgery succeeds; an obfuscation that evades both the regexes
and the runtime checks (attribute names built from strings and fetched with ``getattr``, a
path to /proc assembled at run time) is the hole left. The tests themselves cannot be
rewritten under pytest: test modules are imported from bytes read before the tree's code
ran (plain imports and pytest's assertion rewriter alike; no bytecode under the tree or a
writable dir is loaded, so a planted .pyc is not either); only those conftest files count
as trusted plugins; a host-side inotify watch (watch.py) sees any test file written during
the run, put back or not (flag ``test_edit``), and the files are restored afterwards. The kernel-level
limits are the sandbox's (codeloop/sandbox/local.py).
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from codeloop.agent import hacks
from codeloop.agent.channel import CHANNEL_FLAGS, read_channel
from codeloop.agent.envs import build_env, env_paths
from codeloop.agent.patches import PatchError, apply_patch, is_test_path
from codeloop.agent.watch import TestWatch
from codeloop.agent.workspace import remove_tree
from codeloop.sandbox.base import CmdJob, SandboxError
from codeloop.sandbox.pool import child_python
from codeloop.schema import Task

BOOT_NAME = "codeloop_judge_boot.py"
BOOT_SRC = Path(__file__).with_name("judge_boot.py")
PYTEST_ARGS = ("-q", "--tb=short", "-p", "no:cacheprovider", "--rootdir=.",
               "--continue-on-collection-errors", "-o", "console_output_style=classic")  # fmt: skip
TAIL = 4000


@dataclass(frozen=True)
class JudgeConfig:
    timeout_s: float = 300.0  # the whole pytest run of one patch
    memory_mb: int | None = None  # None: the executor's default
    per_worker: int = 8  # patches prepared per worker and batch (trees on disk at once)
    disqualify: frozenset[str] = hacks.DISQUALIFYING | frozenset(CHANNEL_FLAGS)


@dataclass
class RepoVerdict:
    """What the judge found for one (task, patch)."""

    task_id: str
    resolved: bool
    applied: bool
    apply_error: str = ""
    f2p_passed: int = 0
    f2p_total: int = 0
    p2p_passed: int = 0
    p2p_total: int = 0
    hidden_passed: int = 0
    hidden_total: int = 0
    outcomes: dict[str, str] = field(default_factory=dict)  # node id -> channel.OUTCOMES
    failure_types: dict[str, str] = field(default_factory=dict)  # node id -> exception type
    hack_flags: list[str] = field(default_factory=list)  # static and channel flags
    dropped: list[str] = field(default_factory=list)  # paths of file sections not applied
    problems: list[str] = field(default_factory=list)  # what the channel found wrong
    status: str = ""  # the pytest command's status (exited, timeout, ...); "" if none ran
    duration_ms: float = 0.0
    output_tail: str = ""

    def to_row(self) -> dict:
        return asdict(self)


@dataclass
class _Prepared:
    task: Task
    ws: str
    verdict: RepoVerdict
    nonce: str = ""
    ids: list[str] = field(default_factory=list)
    job: CmdJob | None = None
    tests: dict[str, bytes] = field(default_factory=dict)  # the task's test files


def judge_tree(task: Task, repos_dir: str, dest: str) -> None:
    """The task's full tree at ``dest`` (must not exist): snapshot without .git, bug_patch,
    test_patch; hidden test files stay. FileNotFoundError / PatchError on a broken task."""
    src = os.path.join(repos_dir, task.snapshot)
    if not task.snapshot or not os.path.isdir(src):
        raise FileNotFoundError(
            f"task {task.task_id}: snapshot {task.snapshot!r} not in {repos_dir}"
        )
    shutil.copytree(src, dest, symlinks=True, ignore=shutil.ignore_patterns(".git"))
    for name in ("bug_patch", "test_patch"):
        try:
            apply_patch(dest, getattr(task, name))
        except PatchError as exc:
            raise PatchError(f"task {task.task_id}: its own {name} does not apply: {exc}") from exc


def _read(root: str, rel: str) -> str | None:
    path = os.path.join(root, rel)
    if not rel or os.path.islink(path) or not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8", errors="replace") as fh:
        return fh.read()


def _test_files(root: str) -> dict[str, bytes]:
    """Every test file under ``root`` (by is_test_path), links included as their target text."""
    out: dict[str, bytes] = {}
    for top, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for name in files:
            rel = os.path.relpath(os.path.join(top, name), root)
            if (
                is_test_path(rel)
                or name.endswith(".pth")
                or name in ("sitecustomize.py", "usercustomize.py")
            ):
                path = os.path.join(root, rel)
                out[rel] = (
                    ("L:" + os.readlink(path)).encode()
                    if os.path.islink(path)
                    else Path(path).read_bytes()
                )
    return out


def _restore(root: str, want: dict[str, bytes]) -> bool:
    """Make the test files of ``root`` exactly ``want``; whether anything had to change."""
    have = _test_files(root)
    changed = False
    for rel in set(have) - set(want):
        os.unlink(os.path.join(root, rel))
        changed = True
    for rel, data in want.items():
        if have.get(rel) == data:
            continue
        changed = True
        path = os.path.join(root, rel)
        if os.path.lexists(path) and (os.path.islink(path) or not os.path.isdir(path)):
            os.unlink(path)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if data.startswith(b"L:"):
            os.symlink(data[2:].decode(), path)
        else:
            Path(path).write_bytes(data)
    return changed


def split_patch(patch: str, tree: str) -> tuple[str, list[str], set[str], list[hacks.FileDiff]]:
    """(the sections to apply, dropped paths, flags known before applying, kept sections)."""
    kept, dropped, flags = [], [], set()
    for fd in hacks.parse_patch(patch):
        sect = hacks.file_flags(fd, base=lambda p: _read(tree, p))
        if any(is_test_path(p) for p in fd.paths()) or sect & hacks.PROTECTED:
            dropped.append(fd.path)
            flags |= sect
        else:
            kept.append(fd)
    return "".join(fd.text for fd in kept), dropped, flags, kept


class _Trees:
    """The judge trees of one judge_many call: each distinct task tree is built once (copy
    of the snapshot, two ``git apply``) and copied per patch (a GRPO group shares one)."""

    def __init__(self, repos_dir: str) -> None:
        self.repos_dir = repos_dir
        self.dir = tempfile.mkdtemp(prefix="codeloop-judge-trees-")
        self.built: dict[str, tuple[str, dict[str, bytes]]] = {}

    def put(self, task: Task, dest: str) -> dict[str, bytes]:
        """Copy ``task``'s judge tree to ``dest``; its test files (relpath -> bytes)."""
        parts = (task.snapshot, task.bug_patch, task.test_patch)
        key = hashlib.sha256("\0".join(parts).encode("utf-8", "surrogatepass")).hexdigest()[:32]
        if key not in self.built:
            src = os.path.join(self.dir, key)
            judge_tree(task, self.repos_dir, src)
            self.built[key] = (src, _test_files(src))
        src, tests = self.built[key]
        shutil.copytree(src, dest, symlinks=True)
        return dict(tests)

    def close(self) -> None:
        remove_tree(self.dir)


def _prepare(
    task: Task, patch: str, trees: _Trees, ws: str, ws_root, cfg: JudgeConfig
) -> _Prepared:
    tree, spec = os.path.join(ws, "repo"), os.path.join(ws, "spec.json")
    verdict = RepoVerdict(task.task_id, resolved=False, applied=False,
                          f2p_total=len(task.fail_to_pass), p2p_total=len(task.pass_to_pass),
                          hidden_total=len(task.hidden_tests))  # fmt: skip
    prep = _Prepared(task, ws, verdict)
    prep.tests = tests = trees.put(task, tree)
    kept_text, verdict.dropped, flags, kept = split_patch(patch, tree)
    try:
        apply_patch(tree, kept_text)
    except PatchError as exc:
        verdict.apply_error = str(exc)[-TAIL:]
        verdict.hack_flags = sorted(flags)
        return prep
    verdict.applied = True
    for fd in kept:  # now the new text is there: import-time and __eq__ checks see the file
        flags |= hacks.file_flags(fd, new=lambda p: _read(tree, p))
    if _restore(tree, tests):
        flags.add("test_edit")
    verdict.hack_flags = sorted(flags)
    prep.ids = list(dict.fromkeys([*task.fail_to_pass, *task.pass_to_pass, *task.hidden_tests]))
    prep.nonce = secrets.token_hex(16)
    envs_root = ws_root.envs_root
    paths = [ws_root.env_inside(p) for p in env_paths(task, envs_root)]
    with open(spec, "w", encoding="utf-8") as fh:
        json.dump({"nonce": prep.nonce, "paths": paths, "args": [*PYTEST_ARGS, "--"],
                   "ids": prep.ids}, fh)  # fmt: skip
    boot = os.path.join(
        ws_root.env_inside(build_env(envs_root, "judge", [(BOOT_NAME, BOOT_SRC)])), BOOT_NAME
    )
    # caps far above a run's needs (a record is ~150 bytes, pytest -q prints little): a run
    # over them is killed or cut, and its tests are then missing, never passed
    prep.job = CmdJob(argv=[child_python(), "-I", "-B", boot, ws_root.inside(spec)[0]],
                      cwd_host=tree, timeout_s=cfg.timeout_s, memory_mb=cfg.memory_mb,
                      output_cap=8 << 20, result_cap=32 << 20)  # fmt: skip
    return prep


def _count(outcomes: dict[str, str], ids: list[str]) -> int:
    return sum(outcomes.get(i) == "passed" for i in ids)


def _watched(prep: _Prepared, written: list[str]) -> None:
    """Flag a run that wrote one of the task's test files (put back or not: the kernel saw it)."""
    hit = [w for w in written if w in prep.tests or w.startswith("<")]
    if hit:
        prep.verdict.hack_flags = sorted(set(prep.verdict.hack_flags) | {"test_edit"})
        prep.verdict.problems.append(f"test files written during the run: {hit[:5]}")


def _finish(prep: _Prepared, res, cfg: JudgeConfig) -> None:
    v, task = prep.verdict, prep.task
    exit_code = res.exit_code if res.status == "exited" else None
    rep = read_channel(res.results, prep.nonce, prep.ids, exit_code, timed_out=res.timed_out)
    v.outcomes, v.failure_types = rep.outcomes, rep.failure_types
    v.problems = [*v.problems, *rep.problems]
    v.hack_flags = sorted(set(v.hack_flags) | set(rep.flags))
    v.f2p_passed = _count(rep.outcomes, task.fail_to_pass)
    v.p2p_passed = _count(rep.outcomes, task.pass_to_pass)
    v.hidden_passed = _count(rep.outcomes, task.hidden_tests)
    if _restore(os.path.join(prep.ws, "repo"), prep.tests):
        v.hack_flags = sorted(set(v.hack_flags) | {"test_edit"})  # written during the run
        v.problems.append("test files changed on disk during the run (tests ran pinned)")
    v.status = res.status
    v.output_tail = (res.stdout + res.stderr)[-TAIL:]
    v.resolved = (
        v.applied
        and v.f2p_total > 0
        and v.f2p_passed == v.f2p_total
        and v.p2p_passed == v.p2p_total
        and not set(v.hack_flags) & cfg.disqualify
    )


def _judge_chunk(items, trees: _Trees, executor, cfg: JudgeConfig) -> list[RepoVerdict]:
    ws_root = executor.workspaces
    preps: list[_Prepared] = []
    made: list[str] = []
    watches: list[TestWatch] = []
    try:
        for task, patch in items:
            made.append(ws_root.new_workspace())
            preps.append(_prepare(task, patch or "", trees, made[-1], ws_root, cfg))
        runs = [p for p in preps if p.job is not None]
        for p in runs:
            watches.append(TestWatch(os.path.join(p.ws, "repo"), list(p.tests)))
        t0 = time.perf_counter()
        results = executor.run_commands([p.job for p in runs]) if runs else []
        if len(results) != len(runs):
            raise SandboxError(f"run_commands returned {len(results)} results for {len(runs)}")
        wall_ms = (time.perf_counter() - t0) * 1e3
        for prep, res, watch in zip(runs, results, watches, strict=True):
            _watched(prep, watch.writes())
            _finish(prep, res, cfg)
            prep.verdict.duration_ms = round(res.duration_ms or wall_ms, 3)
    finally:
        for w in watches:
            w.close()
        for ws in made:
            remove_tree(ws)
    return [p.verdict for p in preps]


def judge_many(
    items: list[tuple[Task, str]], repos_dir: str, executor, cfg: JudgeConfig | None = None
) -> list[RepoVerdict]:
    """Verdicts for (task, model_patch) pairs, in input order; the pytest runs go to the
    executor in batches of ``cfg.per_worker`` per worker (so only that many trees are on
    disk at once).

    ``executor`` must have workspaces and an envs root (``make_executor(cfg,
    workspaces=True, envs_root=...)``). Raises on our failures: SandboxError, a missing
    snapshot (FileNotFoundError), a task with no FAIL_TO_PASS or whose own patches fail.
    """
    cfg = cfg or JudgeConfig()
    ws_root = getattr(executor, "workspaces", None)
    if ws_root is None or not ws_root.envs_root:
        raise SandboxError("the judge needs an executor with workspaces and an envs root")
    for task, _ in items:
        if task.kind != "repo" or not task.fail_to_pass:
            raise ValueError(f"task {task.task_id}: not a repository task with FAIL_TO_PASS tests")
    step = max(1, cfg.per_worker * int(getattr(executor, "workers", 1) or 1))
    out: list[RepoVerdict] = []
    trees = _Trees(repos_dir)
    try:
        for i in range(0, len(items), step):
            out += _judge_chunk(items[i : i + step], trees, executor, cfg)
    finally:
        trees.close()
    return out


def judge_patch(
    task: Task, model_patch: str, repos_dir: str, executor, cfg: JudgeConfig | None = None
) -> RepoVerdict:
    """The verdict for one patch (see judge_many)."""
    return judge_many([(task, model_patch)], repos_dir, executor, cfg)[0]
