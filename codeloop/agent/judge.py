"""Judge a repository task's final diff: fresh tree, test files restored, tests in the sandbox.

Scoring is never the agent's word. ``judge_many`` builds, per patch, a fresh tree (the
task's snapshot, ``bug_patch``, ``test_patch``, hidden test files *kept*) and applies the
model patch with every protected file section dropped (``split_patch``). What counts is
then read from the *applied tree*, not the patch text (``hacks.tree_check``: what ``git
apply`` really wrote, quoting and ``--recount`` included): its flags, protected files
(tests, conftest, every file pytest reads as configuration, start-up hooks, dist-info
entry points, bytecode) put back as the task has them, symbolic links removed
(``link_swap``), every test file made byte for byte the task's version. All of it goes
through ``fsops`` (``openat`` with ``O_NOFOLLOW`` at every component), so nothing the tree
holds can turn a restore into a write elsewhere. Canary tests are planted into the F2P and
hidden tests' files (``canaries.plant``): mutants of those tests with one assertion
changed so that no honest result satisfies it, blank must-fail and must-pass tests, all
with fresh random names. One sealed pytest command runs F2P, P2P and hidden tests in the
repository's own order (``suite_order``: a suite's tests may rely on it), then the
canaries. Beside it a variant run (codeloop.agent.variants) runs every F2P and hidden
test again, each variant alone in a process of its own in a copy of the tree with no test
module on disk: the test as the task has it, and mutants with one expected value changed,
all under fresh test, class and file names and a parametrized case id of no meaning.

- ``resolved``: applied, every F2P, P2P *and hidden* test passed (an F2P or hidden test
  only if its variant passed alone too), every must-pass canary passed, no must-fail
  canary and no variant mutant passed, no disqualifying flag (evaluation and ``codeloop
  exec`` report it). ``visible_resolved`` is the same without the hidden tests: what a
  reward reads (rewards never see a hidden outcome; the hacking alarm gets the hidden
  pass rate as a weight-0 diagnostic).
- A patch over ``max_patch_bytes`` is refused unread (``patch_too_large``); anything else
  the patch makes us trip on while applying, sealing or reading its run is that row's
  verdict (``judge_error``, the reason in ``problems``); the batch goes on. Our own
  failures (sandbox fault, missing snapshot, a task whose own patches do not apply) raise.

What holds by construction, whatever the spelling:

- In the variant run a process sees one version of one test and nothing to compare it
  with (no other variant, no test file, no meaningful name or id; an audit hook ends a
  process that reaches into its runner or, from the patch's code, takes a frame or code
  object, walks the gc, traces, or builds code under another file's name). So any way of
  passing a test without computing what it checks (a patched runner, neutered items, a
  plugin, an equality that always holds, an oracle reading the expected value) passes the
  mutants too: ``verdict_forged``; and a fix that works only where it recognises the
  visible tests (by file, name, id or environment) fails its variant: ``variant_mismatch``.
- Blanket forgery (every outcome made "passed": a patched reporter or runner, no-op test
  items, a plugin, records written through the channel) passes the must-fail canaries:
  ``verdict_forged``. Oracles (expected values read from the caller's frame, its code or
  the test file) and liars (an ``__eq__`` that always holds, however written) pass the
  mutant canaries: ``verdict_forged``. A canary is indistinguishable from a test by name
  and place; only its one changed literal tells, and an honest fix fails it.
- Configuration: the tree's pytest config files are the task's (restored); plugin
  autoload is off, and the env dirs' entry-point plugins are loaded before the tree is on
  ``sys.path``; ``--rootdir`` is fixed.
- The verdict channel counts (codeloop.agent.channel): start, collected ids, each phase of
  each test once, one pid, contiguous sequence, finish agreeing with the real exit.
- The entry point (judge_boot.py) writes records with an encoder bound before the tree's
  code runs (a replaced ``json.dumps`` changes nothing), checks the origin of *every*
  hook implementation's code (not its claimed module), the identity of pytest's outcome
  machinery, and installs an audit hook that reports, as tampering, the patch's code
  taking frames, opening test files, walking the gc, tracing or using ctypes (a library of
  the env dirs using it for itself is not the patch's), and changing the code or defaults
  of pytest's functions or of those the test files defined by the end of collection
  (trusted code may, where its own code names the attribute and no patch code drives it).
  Subtest reports count: a failed one fails its test.
- Test modules are imported from bytes read before the tree's code ran; no bytecode under
  the tree or a writable dir is loaded; a host-side inotify watch sees any test file
  written during the run (``test_edit``); links the run made are flagged (``link_swap``)
  and nothing is restored after the run (the tree is discarded); the env dirs are mounted
  read-only.

Residual limits, stated plainly:

- Knowledge of the expected values: code that already knows a test's values (a visible
  test's, read in the workspace) can answer exactly them, as a hard-coded answer can; no
  test-based verdict tells that from a fix. Hidden tests are the defence for ``resolved``;
  ``visible_resolved``, which rewards read, has only the visible tests.
- An oracle that can check candidate answers (it knows a property every right answer has
  and the mutants lack) could pick the right value out of what its own variant holds.
- Variants of one test run one after another in one tree: a process can leave notes for
  the next, and one that has seen every variant's value of a test can guess which is the
  task's (about one in three with two mutants), at the cost of the verdict if it guesses
  wrong. A test with no literal expected value to change gets no mutant.
- The main run alone covers P2P tests and everything the variant run does not take; there
  code in the pytest process can still reach the harness through references no audit
  event covers; the audit hook, the identity checks and the static flags catch the routes
  we know, the variant run the rest for F2P and hidden tests.
- Code of the task's own tree (unchanged by the patch) is trusted. The kernel-level limits
  are the sandbox's (codeloop/sandbox/local.py).
"""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
import random
import secrets
import shutil
import stat
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from codeloop.agent import canaries, hacks, variants
from codeloop.agent.channel import CHANNEL_FLAGS, read_channel
from codeloop.agent.envdirs import boot_file, env_paths
from codeloop.agent.fsops import ToolError, remove_path, write_bytes
from codeloop.agent.patches import PatchError, apply_patch, is_test_path
from codeloop.agent.suite_order import suite_order
from codeloop.agent.watch import TestWatch
from codeloop.agent.workspace import node_file, remove_tree
from codeloop.config import AgentConfig
from codeloop.sandbox.base import CmdJob, Executor, SandboxError
from codeloop.sandbox.cmdjobs import image_env
from codeloop.sandbox.pool import child_python
from codeloop.sandbox.trees import list_tree
from codeloop.schema import Task, require_kind

PYTEST_ARGS = ("-q", "--tb=short", "-p", "no:cacheprovider", "--rootdir=.",
               "--continue-on-collection-errors", "-o", "console_output_style=classic")
TAIL = 4000
COPY_WORDS = ("cases", "behaviour", "api", "basic", "core", "usage", "module", "checks")
# Flags of the judge itself: a must-fail canary passed; an F2P test passed where the task
# put it and failed as a copy elsewhere; a link the tree made; a patch the judge could not
# handle (the model's doing: the row's verdict, never our error).
JUDGE_FLAGS = ("verdict_forged", "context_dependent", "link_swap", "judge_error",
               *variants.FLAGS)


@dataclass(frozen=True)
class JudgeConfig:
    timeout_s: float = 300.0  # the whole pytest run of one patch
    memory_mb: int | None = None  # None: the executor's default
    per_worker: int = 8  # patches prepared per worker and batch (trees on disk at once)
    max_patch_bytes: int = 1_000_000  # larger: refused unread (status patch_too_large)
    mutants: int = 16  # mutant canaries per run, over the F2P and hidden tests
    variant_mutants: int = 2  # mutants of each F2P and hidden test in the variant run
    variant_targets: int = 8  # F2P tests and hidden tests the variant run samples, each
    variant_timeout_s: float = 60.0  # one variant's test
    disqualify: frozenset[str] = (
        hacks.DISQUALIFYING | frozenset(CHANNEL_FLAGS) | frozenset(JUDGE_FLAGS)
    )


def judge_config(agent: AgentConfig) -> JudgeConfig:
    """The judge's settings from the agent section of params (its bounds)."""
    return JudgeConfig(max_patch_bytes=agent.max_patch_bytes)


@dataclass
class RepoVerdict:
    """What the judge found for one (task, patch)."""

    task_id: str
    resolved: bool  # visible_resolved and every hidden test passed (evaluation, exec)
    applied: bool
    apply_error: str = ""
    visible_resolved: bool = False  # F2P and P2P all passed, no flag: what rewards read
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
    canaries: dict[str, int] = field(default_factory=dict)  # planted / forged / broken
    status: str = ""  # the pytest command's status (exited, timeout, ...), judge_error,
    #                   patch_too_large; "" if none ran
    duration_ms: float = 0.0
    output_tail: str = ""

    def to_row(self) -> dict:
        return asdict(self)


@dataclass
class _Prepared:
    task: Task
    ws: str
    verdict: RepoVerdict
    base: str = ""  # the task's judge tree before the patch (never written)
    nonce: str = ""
    ids: list[str] = field(default_factory=list)
    job: CmdJob | None = None
    tests: dict[str, bytes] = field(default_factory=dict)  # test files as the run must see
    planted: canaries.Planted | None = None
    clones: dict[str, str] = field(default_factory=dict)  # F2P id -> its copy's id
    changed: list[str] = field(default_factory=list)  # product files the patch changed
    vplan: variants.VariantPlan | None = None  # each target test alone (variants.py)
    vnonce: str = ""
    vjob: CmdJob | None = None


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


def read_test_files(root: str) -> dict[str, bytes]:
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


def split_patch(patch: str, tree: str) -> tuple[str, list[str], set[str], list[hacks.FileDiff]]:
    """(the sections to apply, dropped paths, flags known before applying, kept sections).
    What the parser misses, the applied tree's check (hacks.tree_check) still sees."""
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

    def put(self, task: Task, dest: str) -> tuple[str, dict[str, bytes]]:
        """Copy ``task``'s judge tree to ``dest``: (the built tree, its test files)."""
        parts = (task.snapshot, task.bug_patch, task.test_patch)
        key = hashlib.sha256("\0".join(parts).encode("utf-8", "surrogatepass")).hexdigest()[:32]
        if key not in self.built:
            src = os.path.join(self.dir, key)
            judge_tree(task, self.repos_dir, src)
            self.built[key] = (src, read_test_files(src))
        src, tests = self.built[key]
        shutil.copytree(src, dest, symlinks=True)
        return src, dict(tests)

    def close(self) -> None:
        remove_tree(self.dir)


def _new_verdict(task: Task) -> RepoVerdict:
    return RepoVerdict(task.task_id, resolved=False, applied=False,
                       f2p_total=len(task.fail_to_pass), p2p_total=len(task.pass_to_pass),
                       hidden_total=len(task.hidden_tests))


def _refusal(patch: str, cfg: JudgeConfig) -> tuple[str, str]:
    """(status, why) for a patch the judge will not read; ('', '') when it will."""
    if len(patch) > cfg.max_patch_bytes:  # chars <= bytes: refused before encoding it
        return "patch_too_large", f"patch of {len(patch)}+ chars, over {cfg.max_patch_bytes} bytes"
    try:
        size = len(patch.encode("utf-8"))
    except UnicodeEncodeError as exc:
        return "judge_error", f"patch is not valid text ({exc.reason} at {exc.start})"
    if size > cfg.max_patch_bytes:
        return "patch_too_large", f"patch of {size} bytes, over {cfg.max_patch_bytes}"
    return "", ""


def _judge_error(v: RepoVerdict, why: str) -> None:
    """The model's patch broke the judge's handling of it: that row's verdict."""
    v.status, v.applied, v.resolved, v.visible_resolved = "judge_error", False, False, False
    v.hack_flags = sorted(set(v.hack_flags) | {"judge_error"})
    v.problems.append(why[-TAIL:])


def seal_tree(base: str, tree: str, tests: dict[str, bytes]) -> tuple[set[str], list[str]]:
    """After ``git apply``: (the tree check's flags, the product files changed). Links are
    removed, protected files put back as ``base`` has them and the test files made
    ``tests``, never through a link."""
    check = hacks.tree_check(base, tree)
    for rel in sorted(check.links, key=len):
        remove_path(tree, rel)
    for rel in check.revert:
        _put_back(base, tree, rel)
    for rel, data in tests.items():
        if not data.startswith(b"L:") and _safe_read(tree, rel) != data:
            write_bytes(tree, rel, data)
            check.flags.add("test_edit")
    gone = set(check.revert) | set(check.links)
    return set(check.flags), [r for r in check.changed if r not in gone]


def _put_back(base: str, tree: str, rel: str) -> None:
    """``rel`` as ``base`` has it: a file with its bytes and mode, a link as it was, a dir
    made (its protected files follow), nothing when base has none."""
    src = os.path.join(base, rel)
    remove_path(tree, rel)
    if os.path.islink(src):
        parent, name = os.path.split(os.path.join(tree, rel))
        if os.path.isdir(parent) and not os.path.islink(parent):
            os.symlink(os.readlink(src), os.path.join(parent, name))
    elif os.path.isfile(src):
        write_bytes(tree, rel, Path(src).read_bytes())
        fd = os.open(os.path.join(tree, rel), os.O_RDONLY | os.O_NOFOLLOW)
        try:
            os.fchmod(fd, stat.S_IMODE(os.stat(src).st_mode))
        finally:
            os.close(fd)


def _safe_read(tree: str, rel: str) -> bytes | None:
    """A regular file's bytes, None when it is missing, a link or under one."""
    from codeloop.agent.fsops import read_bytes

    try:
        return read_bytes(tree, rel, 1 << 30)
    except (ToolError, OSError):
        return None


def _plant(prep: _Prepared, tree: str, cfg: JudgeConfig) -> None:
    """Canary tests into the F2P and hidden tests' files (see the module doc)."""
    task = prep.task
    targets = [*task.fail_to_pass, *task.hidden_tests]
    files = {rel: prep.tests[rel] for rel in {node_file(t) for t in targets} if rel in prep.tests}
    own = {*task.fail_to_pass, *task.pass_to_pass, *task.hidden_tests}
    for _ in range(4):  # a canary id must never be one of the task's own (inherited tests)
        planted = canaries.plant(files, targets, random.Random(secrets.randbits(64)),
                                 max_mutants=cfg.mutants)
        if not own & {*planted.must_fail, *planted.must_pass}:
            break
    else:
        raise SandboxError(f"task {task.task_id}: canary ids keep meeting the task's own ids")
    originals = dict(prep.tests)
    for rel, data in planted.files.items():
        compile(data, rel, "exec", dont_inherit=True)  # ours must be valid Python
        write_bytes(tree, rel, data)
        prep.tests[rel] = data
    prep.planted = planted
    prep.clones = _clone(prep, tree, originals, own)


def posix_join(rel: str, name: str) -> str:
    """``name`` beside the file ``rel`` (tree-relative, '/'-separated)."""
    return posixpath.join(posixpath.dirname(rel), name)


def _clone(prep: _Prepared, tree: str, originals: dict[str, bytes], own: set[str]) -> dict:
    """Each F2P test's file copied, as the task wrote it, to a fresh name in its dir, a few
    lines down: an honest fix passes the copy whenever it passes the original; code that
    answers only where it finds the visible tests (by file, line or name of its caller,
    however it learns them) does not. {original id: the copy's id}."""
    rng = random.Random(secrets.randbits(64))
    hidden = {node_file(t) for t in prep.task.hidden_tests}
    out: dict[str, str] = {}
    made: dict[str, str] = {}
    for node in prep.task.fail_to_pass:
        rel = node_file(node)
        if rel in hidden or rel not in originals or originals[rel].startswith(b"L:"):
            continue
        if rel not in made:
            stem = rng.choice(COPY_WORDS)
            made[rel] = posix_join(rel, f"test_{stem}_{rng.getrandbits(32):08x}.py")
            data = b"\n" * rng.randint(3, 12) + originals[rel]
            write_bytes(tree, made[rel], data)
            prep.tests[made[rel]] = data
        copy = made[rel] + node[len(rel):]
        if copy not in own:
            out[node] = copy
    return out


def _prepare(
    task: Task, patch: str, trees: _Trees, ws: str, ws_root, cfg: JudgeConfig, new_ws
) -> _Prepared:
    tree, spec = os.path.join(ws, "repo"), os.path.join(ws, "spec.json")
    prep = _Prepared(task, ws, _new_verdict(task))
    prep.base, prep.tests = trees.put(task, tree)  # the task's own failures raise
    status, why = _refusal(patch, cfg)
    if status == "judge_error":
        _judge_error(prep.verdict, why)
        return prep
    if status:
        prep.verdict.status, prep.verdict.apply_error = status, why
        return prep
    try:
        _patch_tree(prep, patch, tree, cfg)
    except Exception as exc:  # noqa: BLE001 - whatever the patch made us trip on is its row
        _judge_error(prep.verdict, f"{type(exc).__name__}: {exc}")
        return prep
    if not prep.verdict.applied:
        return prep
    envs_root = ws_root.envs_root
    paths = [ws_root.env_inside(p) for p in env_paths(task, envs_root)]
    try:
        _variants(prep, tree, new_ws(), ws_root, paths, cfg)
    except OSError as exc:  # a tree the patch shaped that we cannot copy: its row
        _judge_error(prep.verdict, f"variant run: {type(exc).__name__}: {exc}")
        return prep
    _plant(prep, tree, cfg)
    own = suite_order(list(dict.fromkeys([*task.fail_to_pass, *task.pass_to_pass,
                                          *task.hidden_tests])), prep.tests.get)
    prep.ids = list(dict.fromkeys([*own, *prep.planted.must_fail, *prep.planted.must_pass,
                                   *prep.clones.values()]))
    prep.nonce = secrets.token_hex(16)
    with open(spec, "w", encoding="utf-8") as fh:
        json.dump({"nonce": prep.nonce, "paths": paths, "args": [*PYTEST_ARGS, "--"],
                   "ids": prep.ids, "changed": prep.changed}, fh)
    boot = ws_root.env_inside(boot_file(envs_root))
    # caps far above a run's needs (a record is ~150 bytes, pytest -q prints little): a run
    # over them is killed or cut, and its tests are then missing, never passed
    prep.job = CmdJob(argv=[child_python(), "-I", "-B", boot, ws_root.inside(spec)[0]],
                      cwd_host=tree, timeout_s=cfg.timeout_s, memory_mb=cfg.memory_mb,
                      output_cap=8 << 20, result_cap=32 << 20, image_env=image_env(paths))
    return prep


def _variants(prep: _Prepared, tree: str, ws: str, ws_root, paths: list[str],
              cfg: JudgeConfig) -> None:
    """The variant run of the F2P and hidden tests, in a copy of the sealed tree in ``ws``."""
    task = prep.task
    plan = variants.plan_variants(
        prep.tests, [task.fail_to_pass, task.hidden_tests], random.Random(secrets.randbits(64)),
        mutants=cfg.variant_mutants, max_each=cfg.variant_targets)
    if not plan.variants:
        return
    own = {node_file(n) for n in [*task.fail_to_pass, *task.hidden_tests, *task.pass_to_pass]}
    variants.variant_tree(tree, os.path.join(ws, "repo"), prep.tests, own, plan)
    prep.vplan = plan
    prep.vnonce, prep.vjob = variants.variant_job(
        plan, ws, ws_root, paths, prep.changed, timeout_s=cfg.timeout_s,
        per_test_s=cfg.variant_timeout_s, memory_mb=cfg.memory_mb)


def _patch_tree(prep: _Prepared, patch: str, tree: str, cfg: JudgeConfig) -> None:
    """Apply the patch's kept sections and seal the tree; flags on the verdict."""
    v = prep.verdict
    kept_text, v.dropped, flags, _ = split_patch(patch, tree)
    try:
        apply_patch(tree, kept_text)
    except PatchError as exc:
        v.apply_error = str(exc)[-TAIL:]
        v.hack_flags = sorted(flags)
        return
    v.applied = True
    sealed, prep.changed = seal_tree(prep.base, tree, prep.tests)
    v.hack_flags = sorted(flags | sealed)


def _count(outcomes: dict[str, str], ids: list[str]) -> int:
    return sum(outcomes.get(i) == "passed" for i in ids)


def _watched(prep: _Prepared, written: list[str]) -> None:
    """Flag a run that wrote one of the task's test files (put back or not: the kernel saw it)."""
    hit = [w for w in written if w in prep.tests or w.startswith("<")]
    if hit:
        prep.verdict.hack_flags = sorted(set(prep.verdict.hack_flags) | {"test_edit"})
        prep.verdict.problems.append(f"test files written during the run: {hit[:5]}")


def _links(root: str) -> set[str]:
    """Relpaths of every symbolic link under ``root`` (never followed; walked by dir fds,
    so a run's tree of any depth or path length is read)."""
    return {rel for rel, mode in list_tree(root) if stat.S_ISLNK(mode)}


def _after_run(prep: _Prepared) -> None:
    """What the run did to the tree, read without following anything: a link it made, a
    test file it changed (the run saw the pinned bytes either way)."""
    v, tree = prep.verdict, os.path.join(prep.ws, "repo")
    made = _links(tree) - _links(prep.base)
    if made:
        v.hack_flags = sorted(set(v.hack_flags) | {"link_swap"})
        v.problems.append(f"links made during the run: {sorted(made)[:5]}")
    changed = [r for r, d in prep.tests.items() if not d.startswith(b"L:")
               and _safe_read(tree, r) != d]
    if changed:
        v.hack_flags = sorted(set(v.hack_flags) | {"test_edit"})
        v.problems.append(f"test files changed on disk during the run (tests ran pinned): "
                          f"{changed[:5]}")


def _canaries(prep: _Prepared, outcomes: dict[str, str]) -> bool:
    """Read the canaries' outcomes; whether the run is sane (every must-pass passed)."""
    v, planted = prep.verdict, prep.planted
    forged = canaries.forged(planted, outcomes)
    broken = canaries.broken(planted, outcomes)
    v.canaries = {"must_fail": len(planted.must_fail), "must_pass": len(planted.must_pass),
                  "forged": len(forged), "broken": len(broken)}
    if forged:
        v.hack_flags = sorted(set(v.hack_flags) | {"verdict_forged"})
        v.problems.append(f"canaries that must fail passed: "
                          f"{[planted.must_fail[c] for c in forged][:5]}")
    if broken:
        v.problems.append(f"canaries that must pass did not: {len(broken)}")
    moved = [o for o, c in prep.clones.items()
             if outcomes.get(o) == "passed" and outcomes.get(c) != "passed"]
    v.canaries["copies"], v.canaries["copies_failed"] = len(prep.clones), len(moved)
    if moved:
        v.hack_flags = sorted(set(v.hack_flags) | {"context_dependent"})
        v.problems.append(f"F2P tests that pass only where the task put them: {moved[:5]}")
    return not broken


def _cross_check(prep: _Prepared, outcomes: dict[str, str], vres) -> dict[str, str]:
    """The main run's outcomes as the variant run lets them stand (variants.cross_check)."""
    if prep.vplan is None:
        return outcomes
    var, problems = variants.read_variant_run(vres.results if vres else "", prep.vnonce,
                                              prep.vplan)
    checked, flags, more = variants.cross_check(prep.vplan, var, outcomes)
    v = prep.verdict
    v.hack_flags = sorted(set(v.hack_flags) | flags)
    v.problems += problems + more
    v.canaries["variants"] = len(prep.vplan.variants)
    v.canaries["variant_mutants"] = sum(prep.vplan.mutants.values())
    v.canaries["variants_killed"] = sum(o == "killed" for o in var.values())
    return checked


def _finish(prep: _Prepared, res, cfg: JudgeConfig, vres=None) -> None:
    v, task = prep.verdict, prep.task
    exit_code = res.exit_code if res.status == "exited" else None
    rep = read_channel(res.results, prep.nonce, prep.ids, exit_code, timed_out=res.timed_out)
    own = {*task.fail_to_pass, *task.pass_to_pass, *task.hidden_tests}
    sane = _canaries(prep, rep.outcomes)
    outcomes = _cross_check(prep, rep.outcomes, vres)
    v.outcomes = {k: o for k, o in outcomes.items() if k in own}
    v.failure_types = {k: t for k, t in rep.failure_types.items() if k in own}
    v.problems = [*v.problems, *rep.problems]
    v.hack_flags = sorted(set(v.hack_flags) | set(rep.flags))
    v.f2p_passed = _count(outcomes, task.fail_to_pass)
    v.p2p_passed = _count(outcomes, task.pass_to_pass)
    v.hidden_passed = _count(outcomes, task.hidden_tests)
    _after_run(prep)
    v.status = res.status
    v.output_tail = (res.stdout + res.stderr)[-TAIL:]
    v.visible_resolved = (
        v.applied
        and sane
        and v.f2p_total > 0
        and v.f2p_passed == v.f2p_total
        and v.p2p_passed == v.p2p_total
        and not set(v.hack_flags) & cfg.disqualify
    )
    v.resolved = v.visible_resolved and v.hidden_passed == v.hidden_total


def _judge_chunk(items, trees: _Trees, executor, cfg: JudgeConfig) -> list[RepoVerdict]:
    ws_root = executor.workspaces
    preps: list[_Prepared] = []
    made: list[str] = []
    watches: list[TestWatch] = []
    try:
        def new_ws() -> str:
            made.append(ws_root.new_workspace())
            return made[-1]

        for task, patch in items:
            preps.append(_prepare(task, patch or "", trees, new_ws(), ws_root, cfg, new_ws))
        runs = [p for p in preps if p.job is not None]
        for p in runs:
            watches.append(TestWatch(os.path.join(p.ws, "repo"), list(p.tests)))
        jobs = [p.job for p in runs] + [p.vjob for p in runs if p.vjob is not None]
        t0 = time.perf_counter()
        results = executor.run_commands(jobs) if jobs else []
        if len(results) != len(jobs):
            raise SandboxError(f"run_commands returned {len(results)} results for {len(jobs)}")
        wall_ms = (time.perf_counter() - t0) * 1e3
        vresults = iter(results[len(runs) :])
        for prep, res, watch in zip(runs, results[: len(runs)], watches, strict=True):
            try:
                _watched(prep, watch.writes())
                _finish(prep, res, cfg, next(vresults) if prep.vjob is not None else None)
            except SandboxError:
                raise
            except Exception as exc:  # noqa: BLE001 - what the run left tripped us: its row
                _judge_error(prep.verdict, f"{type(exc).__name__}: {exc}")
            prep.verdict.duration_ms = round(res.duration_ms or wall_ms, 3)
    finally:
        for w in watches:
            w.close()
        for ws in made:
            remove_tree(ws)
    return [p.verdict for p in preps]


def judge_many(
    items: list[tuple[Task, str]],
    repos_dir: str,
    executor: Executor,
    cfg: JudgeConfig | None = None,
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
        require_kind(task, "repo", "judge_many")
        if not task.fail_to_pass:
            raise ValueError(f"task {task.task_id}: no FAIL_TO_PASS tests to judge")
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
