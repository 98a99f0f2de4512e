"""Reward terms of the episode modes: tdd's test quality and rubber_duck's explanation.

They apply by mode, on top of the composition named by ``metadata.reward_fn_version``
(which stays the registry version): a row without ``model_tests`` and without
``explain`` actions is scored exactly as before.

- ``test_quality`` (tdd, function tasks; weight ``reward.tdd_weight``): the asserts the
  model wrote before its code (``Trajectory.model_tests``, one per line; other lines are
  ignored) run in the sandbox against the task's reference solution, where each should
  pass, and against known-wrong variants, each of which at least one assert should catch:
  mutants of the reference (``generator.wrong_solution``, seeded by the task: the model
  cannot choose them) and the episode's own failed codes. test_quality = pass share on the
  reference x caught share of the variants: tests that assert nothing (pass everywhere)
  and tests that fail everywhere both score 0, and with no variant at all nothing shows
  the tests tell right from wrong, so they score 0 too. Variants that never compiled
  (syntax_error, no_code) are left out: any test catches them.
  The task's hidden tests and the main reward are untouched.
- ``test_quality`` (tdd, repository tasks; same key and weight): the test files the model
  wrote (``model_tests``, a JSON object path -> content) are added to the task's tree and
  their tests (by pytest's default names: top-level ``test*`` functions, ``test*`` methods
  of ``Test*`` classes) become the only FAIL_TO_PASS tests of a derived task, which the
  real judge runs twice: with the task's reference ``patch`` and with no patch (the buggy
  tree). test_quality = 1 if the judge resolves the reference run and some model test
  did not pass on the buggy tree, else 0 (a test passing or failing on both trees tells
  nothing). Canaries and flags count as for any patch: a test
  whose mutants pass like it does is not read as passing. A file that does not compile, or
  one outside the tree, has no tests; no tests at all scores 0 without a run. A collection
  error is a test that did not pass, on either tree (a test of a name the fix adds fails on
  the buggy tree that way). A parametrized test is asked for by its function's id, which
  pytest expands into cases of other ids, so it never counts as passing.
- ``explains_failing_line`` (rubber_duck, both kinds; weight ``reward.explain_weight``,
  recorded only when > 0): the share of ``explain`` actions that quote what the run just
  before them failed on: the failing test (the assert, its call, or a pytest test's name)
  or a source line its traceback points at.

Our infrastructure failing (SandboxError) marks the row's ``infra_error``, never a 0.
"""

from __future__ import annotations

import ast
import json
import os
import random
import re
import tempfile
from dataclasses import replace
from pathlib import PurePosixPath

from codeloop.agent.judge import JudgeConfig, RepoVerdict, judge_many, judge_tree
from codeloop.agent.model_tests import is_model_test
from codeloop.agent.patches import file_diff
from codeloop.agent.workspace import remove_tree
from codeloop.config import RewardConfig
from codeloop.data.generator import wrong_solution
from codeloop.data.repos.diffs import split_files
from codeloop.policy.prompts import extract_code, signature
from codeloop.rewards.components import rounded
from codeloop.sandbox.base import ExecJob, ExecResult, SandboxError
from codeloop.sandbox.faults import isolate_faults
from codeloop.schema import Action, Observation, Task, Trajectory

TDD_KEY = "test_quality"
EXPLAIN_KEY = "explains_failing_line"
CODE_ACTIONS = ("generate", "revise")
UNCOMPILED = ("syntax_error", "no_code")
MUTANTS = 3  # mutants of the reference a tdd row's asserts are run against
MIN_QUOTE = 4  # shorter needles (a bare name like "f") would match any prose
# our failures while judging a repo row's model tests: its infra_error (as rewards.repo)
REPO_FAULTS = (SandboxError, OSError, ValueError)
FILE_MODE = 0o100644

_TRACE_LINE = re.compile(r'^\s*File "[^"]*", line \d+.*\n\s*(\S.*)$', re.M)
_PYTEST_SOURCE = re.compile(r"^>\s+(\S.*)$", re.M)
_PYTEST_FAILED = re.compile(r"^(?:FAILED|ERROR)\s+(\S+)", re.M)


def model_asserts(model_tests: str) -> list[str]:
    """The assert statements of ``model_tests``, one per line."""
    lines = (line.strip() for line in (model_tests or "").splitlines())
    return [line for line in lines if line.startswith("assert")]


def action_code(a: Action, task: Task) -> str:
    """The code a generate/revise action submitted, extracted from its text: as written
    when it defines the entry point itself, else as a continuation of the signature."""
    bare = extract_code(a.content)
    if task.entry_point and f"def {task.entry_point}(" in bare:
        return bare
    return extract_code(a.content, prefix=signature(task))


def wrong_variants(t: Trajectory, task: Task) -> list[str]:
    """Known-wrong codes: the reference's mutants, then the episode's failed code turns
    that compiled; distinct."""
    out = reference_mutants(task)
    for a in t.actions:
        status = a.observation.status
        if a.action_type not in CODE_ACTIONS or status == "passed" or status in UNCOMPILED:
            continue
        code = action_code(a, task)
        if code.strip() and code not in out:
            out.append(code)
    return out


def reference_mutants(task: Task, n: int = MUTANTS) -> list[str]:
    """Up to ``n`` distinct wrong programs derived from the reference (generated tasks
    only), seeded by the task so every row of it meets the same ones."""
    rng = random.Random(f"tdd-mutants:{task.task_id}")
    out: list[str] = []
    for _ in range(4 * n):
        wrong = wrong_solution(task, rng)
        if wrong is None:
            break
        if wrong[0] not in out:
            out.append(wrong[0])
        if len(out) == n:
            break
    return out


def _assert_job(task: Task, code: str, asserts: list[str]) -> ExecJob:
    return ExecJob(code=code, tests=list(asserts), setup_code=task.setup_code,
                   io_style="function", entry_point=task.entry_point)


def caught(res: ExecResult) -> bool:
    """At least one assert did not pass on this code."""
    return res.status != "passed" or res.tests_passed < res.tests_total


def test_quality(ref: ExecResult, n_asserts: int, variants: list[ExecResult]) -> float:
    """pass share on the reference x caught share of the variants (see module doc)."""
    if not n_asserts or not variants:
        return 0.0
    share = ref.tests_passed / n_asserts
    return rounded(share * sum(map(caught, variants)) / len(variants))


def _add(t: Trajectory, key: str, value: float, weight: float) -> None:
    t.reward_components[key] = value
    t.reward = rounded(t.reward + weight * value)


def _mark_infra(t: Trajectory, reason: str) -> None:
    t.infra_error, t.reward, t.reward_components = reason, 0.0, {}


def apply_tdd(rows: list[Trajectory], tasks_by_id: dict[str, Task], executor,
              cfg: RewardConfig) -> None:
    """Add ``test_quality`` to the scored rows that carry model_tests (in place)."""
    todo = [(t, tasks_by_id[t.task_id]) for t in rows
            if t.model_tests.strip() and not t.infra_error and t.task_id in tasks_by_id]
    plans = []
    for t, task in todo:
        asserts = model_asserts(t.model_tests)
        codes = [task.reference_solution, *wrong_variants(t, task)] if asserts else []
        plans.append((t, len(asserts), [_assert_job(task, c, asserts) for c in codes]))
    jobs = [j for _, _, js in plans for j in js]
    results = isolate_faults(executor.run_many, executor.run, jobs) if jobs else []
    at = 0
    for t, n, js in plans:
        mine, at = results[at : at + len(js)], at + len(js)
        fault = next((r for r in mine if isinstance(r, SandboxError)), None)
        if fault is not None:
            _mark_infra(t, f"sandbox (model tests): {fault}")
            continue
        value = test_quality(mine[0], n, mine[1:]) if mine else 0.0
        _add(t, TDD_KEY, value, cfg.tdd_weight)


def model_test_files(t: Trajectory) -> dict[str, str]:
    """A repository row's ``model_tests``: the JSON object path -> content the rollout kept."""
    files = json.loads(t.model_tests)
    if not isinstance(files, dict) or not all(isinstance(v, str) for v in files.values()):
        raise ValueError("model_tests is not a JSON object of path -> text")
    return files


def _usable(path: str, content: str) -> bool:
    """A test module's path inside the tree, with text a diff can carry."""
    p = PurePosixPath(path)
    if str(p) != path or p.is_absolute() or ".." in p.parts or not is_model_test(path):
        return False
    try:
        content.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def model_test_ids(path: str, content: str) -> list[str]:
    """The pytest ids of a model test module's tests by pytest's default names (top-level
    ``test*`` functions, ``test*`` methods of ``Test*`` classes); [] when it does not compile."""
    try:
        compile(content, path, "exec", dont_inherit=True)
        tree = ast.parse(content)
    except (SyntaxError, ValueError):
        return []
    ids = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test"):
            ids.append(f"{path}::{node.name}")
        elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            ids += [f"{path}::{node.name}::{m.name}" for m in node.body
                    if isinstance(m, ast.FunctionDef) and m.name.startswith("test")]
    return list(dict.fromkeys(ids))


def _file_bytes(tree: str, rel: str) -> bytes | None:
    path = os.path.join(tree, rel)
    if os.path.islink(path) or not os.path.isfile(path):
        return None
    with open(path, "rb") as fh:
        return fh.read()


def task_files(task: Task, repos_dir: str, paths: list[str]) -> dict[str, bytes | None]:
    """What the task's judge tree holds at each of ``paths`` (None: no file). The tree is
    built only when a path may be there (in the snapshot or one of the task's patches)."""
    touched = set(split_files(task.bug_patch)) | set(split_files(task.test_patch))
    snap = os.path.join(repos_dir, task.snapshot)
    if not any(p in touched or os.path.lexists(os.path.join(snap, p)) for p in paths):
        return dict.fromkeys(paths)
    tmp = tempfile.mkdtemp(prefix="codeloop-tdd-")
    try:
        judge_tree(task, repos_dir, os.path.join(tmp, "tree"))
        return {p: _file_bytes(os.path.join(tmp, "tree"), p) for p in paths}
    finally:
        remove_tree(tmp)


def tdd_task(task: Task, files: dict[str, str], old: dict[str, bytes | None]) -> Task:
    """``task`` whose test_patch also writes the model's ``files`` (over what ``old`` says
    the tree holds there) and whose only tests are theirs, as FAIL_TO_PASS."""
    added = "".join(file_diff(p, old[p], files[p].encode("utf-8"), FILE_MODE, FILE_MODE)
                    for p in sorted(files))
    base = task.test_patch
    if base and not base.endswith("\n"):
        base += "\n"
    ids = [i for p in sorted(files) for i in model_test_ids(p, files[p])]
    return replace(task, test_patch=base + added, fail_to_pass=ids, pass_to_pass=[],
                   hidden_tests=[], visible_tests=ids)


def repo_test_quality(ref: RepoVerdict, buggy: RepoVerdict) -> float:
    """1 when the reference patch resolves and some test does not pass on the buggy tree."""
    return float(bool(ref.visible_resolved) and buggy.f2p_passed < buggy.f2p_total)


def _derive(t: Trajectory, task: Task, repos_dir: str) -> Task | None | Exception:
    """The derived task judging a row's model tests; None when they hold no test."""
    try:
        files = {p: c for p, c in model_test_files(t).items() if _usable(p, c)}
        if not any(model_test_ids(p, c) for p, c in files.items()):
            return None
        return tdd_task(task, files, task_files(task, repos_dir, sorted(files)))
    except REPO_FAULTS as exc:
        return exc


def _judge_derived(derived: list[Task], repos_dir: str, executor, judge) -> list:
    """Per derived task, its test quality, or the exception of our failure judging it."""
    items = [(d, patch) for d in derived for patch in (d.patch, "")]
    if not items:
        return []
    got = isolate_faults(lambda batch: judge_many(batch, repos_dir, executor, judge),
                         lambda item: judge_many([item], repos_dir, executor, judge)[0],
                         items, errors=REPO_FAULTS)
    out = []
    for ref, buggy in zip(got[::2], got[1::2], strict=True):
        fault = next((v for v in (ref, buggy) if isinstance(v, Exception)), None)
        out.append(fault if fault is not None else repo_test_quality(ref, buggy))
    return out


def apply_repo_tdd(rows: list[Trajectory], tasks_by_id: dict[str, Task], executor,
                   repos_dir: str, judge: JudgeConfig | None, cfg: RewardConfig) -> None:
    """Add ``test_quality`` to the scored repository rows that carry model_tests (in place);
    rows with the same task and tests share one pair of judge runs."""
    todo = [(t, tasks_by_id[t.task_id]) for t in rows
            if t.model_tests.strip() and not t.infra_error and t.task_id in tasks_by_id]
    plans: dict[tuple[str, str], Task | None | Exception] = {}
    for t, task in todo:
        if (task.task_id, t.model_tests) not in plans:
            plans[(task.task_id, t.model_tests)] = _derive(t, task, repos_dir)
    runs = [k for k, d in plans.items() if isinstance(d, Task)]
    quality = _judge_derived([plans[k] for k in runs], repos_dir, executor, judge)
    judged = dict(zip(runs, quality, strict=True))
    for t, task in todo:
        key = (task.task_id, t.model_tests)
        value = judged.get(key, plans[key])
        if isinstance(value, Exception):
            _mark_infra(t, f"judge (model tests): {type(value).__name__}: {value}")
        else:
            _add(t, TDD_KEY, value or 0.0, cfg.tdd_weight)


def _norm(text: str) -> str:
    return " ".join((text or "").split())


def _test_needles(failing_test: str) -> list[str]:
    """The failing test as quoted: the assert, the call it checks, a pytest test's name."""
    ft = failing_test.strip()
    if not ft:
        return []
    if "::" in ft:
        return [ft, ft.rsplit("::", 1)[1].split("[", 1)[0]]
    body = ft.removeprefix("assert").strip()
    call = re.split(r"\s*(?:==|!=|<=|>=|<|>|\bis\b|\bin\b)\s*", body, maxsplit=1)[0]
    return [ft, body, call]


def failure_needles(obs: Observation) -> list[str]:
    """What an explanation may quote to name the failure ``obs`` shows."""
    text = "\n".join((obs.stderr, obs.output))
    needles = _test_needles(obs.failing_test)
    for test_id in _PYTEST_FAILED.findall(text):
        needles += _test_needles(test_id)
    needles += _TRACE_LINE.findall(text) + _PYTEST_SOURCE.findall(text)
    return [n for n in (_norm(x) for x in needles) if len(n) >= MIN_QUOTE]


def names_failing_line(explanation: str, obs: Observation) -> bool:
    """The explanation quotes the failing test or a source line the error points at."""
    prose = _norm(explanation)
    return any(n in prose for n in failure_needles(obs))


def explain_score(actions: list[Action]) -> float | None:
    """Share of explain actions naming the failure just before them (None: none)."""
    hits = [names_failing_line(a.content, actions[i - 1].observation if i else Observation())
            for i, a in enumerate(actions) if a.action_type == "explain"]
    return rounded(sum(hits) / len(hits)) if hits else None


def apply_explain(rows: list[Trajectory], cfg: RewardConfig) -> None:
    """Add ``explains_failing_line`` to scored rows with explain actions (weight > 0)."""
    if cfg.explain_weight <= 0:
        return
    for t in rows:
        score = None if t.infra_error else explain_score(t.actions)
        if score is not None:
            _add(t, EXPLAIN_KEY, score, cfg.explain_weight)
