"""The judge's seal under attack: no hostile patch is resolved, none writes to the host,
none takes the batch down; the gold patch is resolved.

Each attack (tests/_seal_attacks.py) is a real patch on the calc task, of the seven kinds
an independent red team got through: reports forged from product code in the pytest
process (a shared json.dumps, the boot's Channel reached through __main__ or sys.modules
spelled around the flags, pytest's CallInfo, items neutered from the gc heap, test code
swapped, flagged code run from a data file), pytest configuration and plugin discovery
the judge may not know (pytest.toml, .pytest.ini, .pytest.toml, dist-info and egg-info
entry points), patch text the flagger reads unlike ``git apply`` (quoted and octal-escaped
paths, hunk headers over- and undercounting, a plain diff's name choice), oracles and
liars (the expected value read from the caller's frame, code or test file; an ``__eq__``
that always holds, however spelled), a fix that switches itself off under a hidden test,
links that would make the host side write outside the workspace, and patches that trip
the host side (a dangling link, lone surrogates, a NUL, FIFOs). All are judged in one
``judge_many`` batch, local and docker; ``codeloop exec`` gets a surrogate and a link row
among normal ones and, alone, a 24 MiB patch; an agent episode forges run_tests' report.
Each attack is also run under an unguarded pytest, to show it does what it claims.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from codeloop.agent.judge import judge_many, judge_tree
from codeloop.agent.patches import apply_patch
from codeloop.config import SandboxConfig
from codeloop.io import write_tasks
from codeloop.sandbox import make_executor
from codeloop.sandbox.docker_backend import skip_without_docker_engine
from codeloop.sandbox.trees import list_tree
from tests import _seal_attacks as sa
from tests._repo_fixture import make_repo_task, open_agent_env

REPO = Path(__file__).resolve().parents[1]
PYTHON = str(REPO / ".venv" / "bin" / "python") if (REPO / ".venv").is_dir() else sys.executable
ATTACKS = {a.name: a for a in sa.attacks(Path("/owned"))}  # names and kinds (no I/O)
F2P = "tests/test_f2p.py::test_add_positive"
VISIBLE = ["tests/test_visible.py::test_mul", "tests/test_visible.py::test_add_zero"]
HIDDEN = "tests/test_hidden.py::test_add_negative"
CLI = "import sys; from codeloop.cli import main; sys.exit(main())"  # no codeloop/__main__.py
FIFO_PATIENCE_S = 45.0  # a FIFO the judge still holds after this is opened to free it
BATCH_LIMIT_S = 420.0  # a batch still running after this counts as hung
BIG_LIMIT_S = 30.0  # the 24 MiB patch's verdict must come back within this


def _state(root: Path) -> dict[str, tuple]:
    """relpath -> (kind, mode, size, mtime, content hash or link target), nothing followed."""
    out = {}
    for top, dirs, files in os.walk(root):
        for name in dirs + files:
            path = os.path.join(top, name)
            st = os.lstat(path)
            if stat.S_ISLNK(st.st_mode):
                extra = os.readlink(path)
            elif stat.S_ISREG(st.st_mode):
                extra = hashlib.sha256(Path(path).read_bytes()).hexdigest()
            else:
                extra = ""
            out[os.path.relpath(path, root)] = (
                stat.S_IFMT(st.st_mode),
                stat.S_IMODE(st.st_mode),
                st.st_size if not stat.S_ISDIR(st.st_mode) else 0,
                st.st_mtime_ns if not stat.S_ISDIR(st.st_mode) else 0,
                extra,
            )
    return out


def _marked(dirs=("/tmp", "/dev/shm")) -> set[str]:
    return {
        os.path.join(d, n) for d in dirs if os.path.isdir(d) for n in os.listdir(d) if sa.MARK in n
    }


@dataclass
class Batch:
    verdicts: dict = field(default_factory=dict)
    error: str = ""  # what judge_many raised
    hung: bool = False  # still running after BATCH_LIMIT_S
    freed_fifos: list[str] = field(default_factory=list)  # FIFOs the judge blocked on
    seconds: float = 0.0
    changed: dict = field(default_factory=dict)  # host path -> (before, after)
    marked: set = field(default_factory=set)  # marked names new in /tmp, /dev/shm
    new_tmp: set = field(default_factory=set)  # every name new in /tmp (others' too)
    owned: dict = field(default_factory=dict)  # attack -> what its owned dir holds

    def ran(self) -> None:
        """Fail unless the batch ran to its end (a host check of a batch that died first
        would pass for nothing)."""
        if not self.verdicts:
            pytest.fail(f"the batch gave no verdicts: error {self.error!r}, hung {self.hung}")

    def verdict(self, name):
        if name not in self.verdicts:
            pytest.fail(f"no verdict for {name}: batch error {self.error!r}, hung {self.hung}")
        return self.verdicts[name]


def _free_fifos(ws_root: str, seen: dict[str, float], freed: list[str]) -> None:
    """Open for writing (and close) every FIFO under the workspaces that has sat there
    past FIFO_PATIENCE_S: a host-side read blocked on it gets EOF and goes on."""
    now = time.monotonic()
    try:
        found = list_tree(ws_root)  # a run's tree may be any depth: no recursion here
    except OSError:
        return  # a workspace went while it was listed: the next look sees the rest
    for rel, mode in found:
        path = os.path.join(ws_root, rel)
        if not stat.S_ISFIFO(mode) or len(path) >= 4000:
            continue
        if now - seen.setdefault(path, now) > FIFO_PATIENCE_S and path not in freed:
            try:
                os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
                freed.append(path)
            except OSError:
                pass


def _judge_watched(items, repos: str, ex, out: Batch):
    box: dict = {}

    def work():
        try:
            box["v"] = judge_many(items, repos, ex)
        except BaseException as exc:  # noqa: BLE001 - the batch must never raise: recorded
            box["e"] = f"{type(exc).__name__}: {exc}"

    t0 = time.monotonic()
    th = threading.Thread(target=work, daemon=True)
    th.start()
    seen: dict[str, float] = {}
    while th.is_alive() and time.monotonic() - t0 < BATCH_LIMIT_S:
        th.join(0.5)
        _free_fifos(ex.workspaces.path, seen, out.freed_fifos)
    out.seconds = time.monotonic() - t0
    out.hung = th.is_alive()
    out.error = box.get("e", "")
    return box.get("v")


def judge_attacks(root: Path, backend: str) -> Batch:
    """Every attack, the gold and the empty patch judged in one batch under ``root``, with
    the host state (``root`` with envs/ and repos/, /tmp and /dev/shm names) read before
    and after."""
    task = make_repo_task(root)
    os.makedirs(root / "envs")
    tree = str(root / "tree")
    judge_tree(task, str(root / "repos"), tree)
    attacks = sa.attacks(root / "owned")
    for a in attacks:
        if a.owned:
            os.makedirs(a.owned, exist_ok=True)
    patches = {a.name: sa.patch_of(a, tree, str(root)) for a in attacks}
    patches |= {"gold": task.patch, "empty": ""}
    ex = make_executor(
        SandboxConfig(backend=backend, workers=2, timeout_s=30.0),
        workspaces=True,
        envs_root=str(root / "envs"),
    )
    out = Batch()
    try:
        judge_many([(task, task.patch)], str(root / "repos"), ex)  # env dirs built, warm
        before, marked, tmp = _state(root), _marked(), set(os.listdir("/tmp"))
        verdicts = _judge_watched(
            [(task, p) for p in patches.values()], str(root / "repos"), ex, out
        )
        after = _state(root)
    finally:
        if not out.hung:
            ex.close()
    if verdicts is not None:
        out.verdicts = dict(zip(patches, verdicts, strict=True))
    out.changed = {
        k: (before.get(k), after.get(k))
        for k in set(before) | set(after)
        if before.get(k) != after.get(k)
    }
    out.marked = _marked() - marked
    out.new_tmp = set(os.listdir("/tmp")) - tmp
    out.owned = {a.name: sorted(os.listdir(a.owned)) for a in attacks if a.owned}
    return out


@pytest.fixture(scope="module", params=["local", pytest.param("docker", marks=pytest.mark.docker)])
def judged(request, tmp_path_factory):
    """The batch (judge_attacks) on the local backend, and on docker where it runs."""
    if request.param == "docker":
        skip_without_docker_engine()
    out = judge_attacks(tmp_path_factory.mktemp("seal"), request.param)
    print(f"{request.param}: {len(out.verdicts)} verdicts in {out.seconds:.1f} s")
    return out


def test_the_batch_never_raises_and_every_prediction_gets_a_verdict(judged):
    assert (judged.error, judged.hung, judged.freed_fifos) == ("", False, [])
    assert set(judged.verdicts) == {*ATTACKS, "gold", "empty"}


def test_the_gold_patch_is_resolved(judged):
    v = judged.verdict("gold")
    assert v.resolved, (v.problems, v.hack_flags, v.output_tail)
    assert (v.f2p_passed, v.p2p_passed, v.hidden_passed) == (v.f2p_total, v.p2p_total, 1)


def test_the_empty_patch_is_not_resolved(judged):
    v = judged.verdict("empty")
    assert v.applied and not v.resolved and v.f2p_passed == 0


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_no_attack_is_resolved(judged, name):
    v = judged.verdict(name)
    assert not v.resolved, (v.outcomes, v.hack_flags, v.problems[:5])


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_no_attack_earns_what_a_reward_reads(judged, name):
    v = judged.verdict(name)
    assert not getattr(v, "visible_resolved", v.resolved), (v.outcomes, v.hack_flags)


@pytest.mark.parametrize("name", sorted(n for n, a in ATTACKS.items() if a.flag))
def test_code_the_patch_format_hides_is_flagged_as_git_applied_it(judged, name):
    v = judged.verdict(name)
    assert v.applied and ATTACKS[name].flag in v.hack_flags, (v.hack_flags, v.apply_error)


@pytest.mark.parametrize("name", ["lone_surrogate_line", "lone_surrogate_path"])
def test_a_patch_that_is_not_valid_text_gets_a_verdict_saying_why(judged, name):
    v = judged.verdict(name)
    assert not v.resolved and (v.apply_error or v.problems), v


def test_no_host_file_under_the_tmp_root_envs_or_repos_is_created_or_changed(judged):
    judged.ran()
    assert judged.changed == {}


@pytest.mark.parametrize("name", sorted(n for n, a in ATTACKS.items() if a.owned))
def test_the_host_dir_an_attack_aims_at_stays_empty(judged, name):
    judged.ran()
    assert judged.owned[name] == []


def test_no_marked_file_appears_in_the_host_tmp_or_shm(judged):
    judged.ran()
    assert judged.marked == set(), judged.new_tmp


# -- the attacks do what they claim on an unguarded pytest --------------------------------


def _plain_pytest(cwd: str, autoload: bool) -> dict[str, str]:
    """node id -> PASSED/FAILED/ERROR of one plain ``python -m pytest -rA`` run (entry-point
    plugins autoloaded only where the attack needs them: two cores, 0.3 s a start)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    if not autoload:
        env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    argv = [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider"]
    run = subprocess.run(
        [*argv, F2P, *VISIBLE, HIDDEN],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = {}
    for line in run.stdout.splitlines():
        word, _, rest = line.partition(" ")
        if word in ("PASSED", "FAILED", "ERROR"):
            out.setdefault(rest.split(" - ")[0].strip(), word)
    return out


@pytest.fixture(scope="module")
def unguarded(tmp_path_factory):
    """name -> (F2P, visible tests, hidden test) outcomes of a plain pytest run in the
    patched tree: "PASSED" or what else it was ("" if not reported)."""
    root = tmp_path_factory.mktemp("unguarded")
    task = make_repo_task(root)
    tree = str(root / "tree")
    judge_tree(task, str(root / "repos"), tree)
    todo = [a for a in sa.attacks(root / "owned") if a.control]

    def one(a):
        scratch = root / a.name
        work = str(scratch / "tree")
        shutil.copytree(tree, work)
        apply_patch(work, sa.patch_of(a, tree, str(scratch)))
        got = _plain_pytest(work, autoload="entry_point" in a.name)
        visible = {got.get(v, "") for v in VISIBLE}
        return a.name, (
            got.get(F2P, ""),
            "PASSED" if visible == {"PASSED"} else str(visible),
            got.get(HIDDEN, ""),
        )

    with ThreadPoolExecutor(4) as pool:
        return dict(pool.map(one, todo))


@pytest.mark.parametrize("name", sorted(n for n, a in ATTACKS.items() if a.control == "f2p"))
def test_each_forgery_makes_an_unguarded_pytest_pass_the_unfixed_f2p_test(unguarded, name):
    assert unguarded[name][0] == "PASSED", unguarded[name]


@pytest.mark.parametrize("name", sorted(n for n, a in ATTACKS.items() if a.control == "visible"))
def test_each_switch_passes_the_visible_tests_and_fails_the_hidden_one(unguarded, name):
    assert unguarded[name] == ("PASSED", "PASSED", "FAILED")


# -- codeloop exec, in a subprocess with the repo's venv python -------------------------


@pytest.fixture(scope="module")
def exec_setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("seal-exec")
    task = make_repo_task(root)
    write_tasks(root / "tasks.parquet", [task])
    os.makedirs(root / "envs")
    tree = str(root / "tree")
    judge_tree(task, str(root / "repos"), tree)
    return root, task, tree


def _codeloop_exec(root: Path, preds: list[dict], limit_s: float, tag: str):
    """(exit code or None if killed at ``limit_s``, rows, stderr, seconds)."""
    samples, out = root / f"{tag}.jsonl", root / f"{tag}-results.jsonl"
    samples.write_text("".join(json.dumps(p) + "\n" for p in preds))
    opts = {
        "--tasks": root / "tasks.parquet",
        "--samples": samples,
        "--out": out,
        "--repos": root / "repos",
        "--envs": root / "envs",
        "--backend": "local",
        "--workers": 2,
        "--params": root / "no-params.yaml",
    }
    argv = [
        PYTHON,
        "-c",
        CLI,
        "exec",
        *(str(x) for kv in opts.items() for x in kv),
        "--no-progress",
    ]
    t0 = time.monotonic()
    env = {**os.environ, "PYTHONPATH": str(REPO)}  # this checkout's codeloop, wherever it is
    proc = subprocess.Popen(
        argv,
        cwd=root,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        _, err = proc.communicate(timeout=limit_s)
        rc = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        _, err = proc.communicate()
        rc = None
    seconds = time.monotonic() - t0
    rows = [json.loads(x) for x in out.read_text().splitlines()] if out.exists() else []
    return rc, rows, err[-3000:], seconds


def _pred(task, patch, name):
    return {"instance_id": task.task_id, "model_patch": patch, "model_name_or_path": name}


def test_codeloop_exec_gives_every_row_with_a_surrogate_and_links_among_them(exec_setup):
    root, task, tree = exec_setup
    owned = sa.attacks(root / "owned")
    rows_of = {a.name: a for a in owned}
    for name in ("tests_link_to_owned_dir", "tests_link_dangling"):
        os.makedirs(rows_of[name].owned)
    names = (
        "gold lone_surrogate_line tests_link_to_owned_dir empty tests_link_dangling "
        "lone_surrogate_path gold_again"
    ).split()
    patches = {"gold": task.patch, "empty": None, "gold_again": task.patch}
    preds = [
        _pred(task, patches[n] if n in patches else sa.patch_of(rows_of[n], tree, str(root)), n)
        for n in names
    ]
    rc, rows, err, seconds = _codeloop_exec(root, preds, 180.0, "mixed")
    print(f"codeloop exec, 7 rows: {seconds:.1f} s")
    assert rc == 0, err
    assert [r["model_name_or_path"] for r in rows] == names, err
    assert [n for n, r in zip(names, rows, strict=True) if r["resolved"]] == ["gold", "gold_again"]
    for name in ("tests_link_to_owned_dir", "tests_link_dangling"):
        assert os.listdir(rows_of[name].owned) == [], name


def test_a_24_mib_patch_is_refused_fast_with_a_verdict_through_codeloop_exec(exec_setup):
    root, task, _ = exec_setup
    big = sa.big_patch()
    assert len(big) >= 24 << 20
    rc, rows, err, seconds = _codeloop_exec(root, [_pred(task, big, "big")], 2 * BIG_LIMIT_S, "big")
    print(f"codeloop exec, one 24 MiB patch: {seconds:.1f} s (rc {rc})")
    assert rc == 0, f"{seconds:.0f} s, {err}"
    assert len(rows) == 1 and rows[0]["resolved"] is False and rows[0]["applied"] is False, rows
    assert seconds < BIG_LIMIT_S


# -- the agent environment: run_tests' report (process reward) --------------------------

RUN = {"tool": "run_tests", "args": {}}
FORGERIES = {
    "json_dumps_swap": sa.JSON_DUMPS,
    "callinfo_init": sa.CALLINFO_INIT,
    "gc_noop_items": sa.GC_NOOP_ITEMS,
    "code_swap_gc_callback": sa.CODE_SWAP,
}


@pytest.fixture(scope="module")
def episodes(tmp_path_factory):
    """tests_passed of run_tests after each forging edit, and of an honest episode."""
    env, ex, task = open_agent_env(tmp_path_factory.mktemp("seal-env"), max_steps=6)
    try:
        eps = {name: env.reset(task) for name in ["honest", *FORGERIES]}
        env.step_many(
            [
                (eps[n], {"tool": "write_file", "args": {"path": sa.INIT, "content": src}})
                for n, src in FORGERIES.items()
            ]
        )
        obs = env.step_many([(ep, RUN) for ep in eps.values()])
        for ep in eps.values():
            ep.close()
    finally:
        ex.close()
    return dict(zip(eps, obs, strict=True))


def test_an_honest_episode_passes_the_three_visible_tests_the_bug_leaves(episodes):
    assert episodes["honest"].tests_passed == 3


@pytest.mark.parametrize("name", sorted(FORGERIES))
def test_a_forging_edit_never_lifts_run_tests_above_an_honest_run(episodes, name):
    obs = episodes[name]
    assert obs.tests_passed <= episodes["honest"].tests_passed, obs.output[:800]
