"""A scripted expert: the tool calls that solve a repository task, for SFT demonstrations.

It is an expert because it may read the task's reference patch to know the fix; it acts
only through the agent's own tools (schema.TOOLS), in the order a careful person would:
run the tests, read the module the failing test exercises, search for the function the
fix lies in when that is another module and read that module too, make the exact edit,
re-run the tests, submit. Every edit's ``old`` text is on screen when it is written: an
expert that edits code it never read teaches a model to invent the text it replaces
(SFT'd policies did exactly that on cross-module tasks).
The agentloop stage plays these calls through the real environment to record real
observations; nothing here fakes one.

With ``slip=True`` the first edit is preceded by a wrong one (``"slip": True``): its old
text names another function, the way the tiny policy's own failed edits do, so the
environment answers ``no_match`` with the closest lines and the right edit follows, copied
from them. SFT keeps the slip out of the loss (``codeloop.policy.sft.agent_examples``):
the lesson is the mending, never the mistake.

With ``tdd=True`` (``rollout.agent_mode: tdd``) the demonstration opens the way the tdd
prompt asks: it writes its own test file (``MODEL_TEST_PATH``: the task's FAIL_TO_PASS
tests as the task's tree holds them, with their module's imports and helpers, so it fails
on the buggy tree and passes on the fixed one) and runs it, in place of the opening run
of the visible tests (the episode stays within the rollout's step cap); then it fixes as
usual. The workspace's diff leaves test files out, so the submitted fix is unchanged.

A file too long for one observation (``budget``, agent.observation_chars; a real
repository's module of hundreds of lines, as ``codeloop mint`` makes tasks from) is never
read whole: the expert searches for the function the fix lies in, then reads only a line
range around the edit (up to the enclosing ``def``, a few lines below, as many as fit one
observation), so the edit's old text is on screen uncut. A long test file the failing test
lives in is not read at all: the problem statement quotes the test. Every synthetic file
fits one observation, so synthetic demonstrations read whole files as before.
"""

from __future__ import annotations

import ast
import hashlib
import keyword
import random
import re
from pathlib import Path

from codeloop.agent.model_tests import MODEL_TEST_PATH
from codeloop.agent.lines import numbered
from codeloop.config import AgentConfig
from codeloop.data.repos.diffs import apply_file_diff, hunks, split_files
from codeloop.data.repos.store import snapshot_path
from codeloop.schema import Task

# Names a slip puts in place of one in the edit: the synthetic vocabulary (synth.VERBS x
# synth.NOUNS) is what the policy invents from memory; a fixed list keeps expert.py off synth.
SLIP_NAMES = tuple(f"{v}_{n}" for v in ("scale", "shift", "count", "mix", "step", "trim")
                   for n in ("price", "item", "level", "total", "value", "rate"))
_IDENT = re.compile(r"\b[A-Za-z_][A-Za-z0-9_]*\b")
# The observation budget an expert fits its reads to when its caller names none.
BUDGET = AgentConfig.model_fields["observation_chars"].default
WINDOW_ABOVE = 30  # most lines above an edit a ranged read climbs to find its def
WINDOW_BELOW = 5  # lines a ranged read shows below an edit's old text


def _buggy_text(task: Task, repos_dir: str | Path, path: str) -> str:
    """The file as the agent's workspace holds it: the snapshot's with bug_patch applied."""
    text = (snapshot_path(repos_dir, task.snapshot) / path).read_text()
    bug = split_files(task.bug_patch).get(path)
    return apply_file_diff(text, bug) if bug else text


def _edit_strings(hunk: list[str], base: str | None) -> tuple[str, str]:
    """(old, new) for ``edit``: the changed lines, widened by context lines of the hunk
    until ``old`` occurs exactly once in ``base`` (the whole hunk when base is unknown)."""
    body = [x for x in hunk if x[:1] in (" ", "-", "+")]
    changed = [i for i, x in enumerate(body) if x[0] != " "]
    lo, hi = changed[0], changed[-1] + 1

    def sides(a: int, b: int) -> tuple[str, str]:
        part = body[a:b]
        old = "".join(x[1:] for x in part if x[0] in " -")
        new = "".join(x[1:] for x in part if x[0] in " +")
        return old.rstrip("\n"), new.rstrip("\n")

    if base is None:
        return sides(0, len(body))
    while True:
        old, new = sides(lo, hi)
        if old and base.count(old) == 1 or (lo == 0 and hi == len(body)):
            return old, new
        if lo > 0 and (hi == len(body) or (changed[0] - lo) <= (hi - changed[-1] - 1)):
            lo -= 1
        else:
            hi += 1


def _pattern(function: str, lines: list[str]) -> str:
    """What to search for: the function the fix lies in when the task knows it, else the
    first line the fix removes (SWE-bench rows name no function)."""
    if function:
        return f"def {function}"  # names are unique in a synthetic package; no regex escape
    removed = next((x[1:].strip() for x in lines if x.startswith("-") and not x.startswith("---")
                    and x[1:].strip()), "")
    return re.escape(removed[:60]) if removed else "def "


def _fits(text: str, budget: int) -> bool:
    """Whether read_file shows the whole of ``text`` in one observation of ``budget`` chars."""
    lines = text.splitlines()
    return len("\n".join(numbered(lines, 1, len(lines)))) <= budget


def _enclosing_def(text: str, line: int) -> int:
    """The first line of the innermost def or class holding 1-based ``line`` (its
    decorators aside), or 0 when none does or ``text`` is not Python that parses."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return 0
    kinds = ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef
    spans = [n.lineno for n in ast.walk(tree) if isinstance(n, kinds)
             and n.lineno <= line <= (n.end_lineno or n.lineno)]
    return max(spans, default=0)


def _window(text: str, old: str, budget: int) -> tuple[int, int]:
    """(start, end), 1-based and inclusive: the lines of ``text`` a ranged read shows before
    an edit of ``old`` (which occurs once): old's own lines, grown one line at a time, below
    up to WINDOW_BELOW lines and above up to the enclosing def (at most WINDOW_ABOVE lines
    up), while the numbered lines fit ``budget``."""
    lines = text.splitlines()
    lo = text[: text.index(old)].count("\n")  # 0-based first line of old
    hi = lo + old.count("\n") + 1  # exclusive
    def_line = _enclosing_def(text, lo + 1)
    top = def_line - 1 if 0 < lo + 1 - def_line <= WINDOW_ABOVE else max(lo - WINDOW_BELOW, 0)
    bottom = min(hi + WINDOW_BELOW, len(lines))

    def fits(a: int, b: int) -> bool:
        return len("\n".join(numbered(lines, a + 1, b))) <= budget

    while True:
        down = hi < bottom and fits(lo, hi + 1)
        hi += down
        up = lo > top and fits(lo - 1, hi)
        lo -= up
        if not (down or up):
            return lo + 1, hi


def _module_of(node_id: str, task: Task) -> str:
    """The product module a failing test exercises (what a person opens first)."""
    return task.metadata.get("symptom_path") or node_id.split("::", 1)[0]


def slipped(task: Task, fraction: float) -> bool:
    """Whether ``task``'s demonstration slips: a fixed share by a hash of its id."""
    digest = hashlib.sha256(f"slip:{task.task_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < fraction


def _slip(task: Task, call: dict, base: str | None) -> dict | None:
    """A wrong version of an edit: one name in old (and new) swapped for another, chosen so
    that the wrong old occurs nowhere in the file (None when no such swap exists)."""
    args = call["args"]
    names = [m for m in _IDENT.findall(args["old"]) if not keyword.iskeyword(m)]
    if not names or base is None:
        return None
    rng = random.Random(f"slip:{task.task_id}")
    # a name of the x_y shape first: those are the ones the policy gets wrong
    name = rng.choice([n for n in names if "_" in n.strip("_")] or names)
    for other in rng.sample(SLIP_NAMES, len(SLIP_NAMES)):
        swap = re.compile(rf"\b{re.escape(name)}\b")
        old, new = swap.sub(other, args["old"], 1), swap.sub(other, args["new"], 1)
        if other != name and old not in base:
            return {"tool": "edit", "args": {**args, "old": old, "new": new}, "slip": True}
    return None


def _tested_text(task: Task, repos_dir: str | Path | None, path: str) -> str:
    """A test file as the workspace holds it: the buggy text with test_patch applied (a
    synthetic task's failing tests are in its snapshot, a SWE-bench task's test_patch)."""
    lines = split_files(task.test_patch).get(path, [])
    new = any(x.startswith(("new file mode", "--- /dev/null")) for x in lines[:4])
    if not new and repos_dir is None:
        raise ValueError(f"task {task.task_id}: reading {path} needs the snapshot (repos_dir)")
    base = "" if new else _buggy_text(task, repos_dir, path)
    return apply_file_diff(base, lines) if lines else base


def _is_test_def(node: ast.stmt) -> bool:
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        return node.name.startswith("test")
    return isinstance(node, ast.ClassDef) and node.name.startswith("Test")


def _kept_tests(text: str, names: set[str]) -> tuple[list[str], str]:
    """(its ``from __future__`` lines, the module without the tests not in ``names``): its
    imports, helpers and fixtures stay, as do the named tests (functions or classes)."""
    tree = ast.parse(text)
    lines = text.splitlines(keepends=True)
    drop: set[int] = set()
    future: list[str] = []
    for node in tree.body:
        start = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
        span = range(start - 1, node.end_lineno)
        if isinstance(node, ast.ImportFrom) and node.module == "__future__":
            future += [lines[i] for i in span]
            drop.update(span)
        elif _is_test_def(node) and node.name not in names:
            drop.update(span)
    body = "".join(x for i, x in enumerate(lines) if i not in drop)
    return future, re.sub(r"\n{3,}", "\n\n\n", body).strip("\n") + "\n"


def model_test_module(task: Task, repos_dir: str | Path | None = None) -> tuple[str, list[str]]:
    """(the test module an expert writes first in tdd mode, its node ids at MODEL_TEST_PATH):
    the task's FAIL_TO_PASS tests with their modules' imports and helpers."""
    by_file: dict[str, set[str]] = {}
    for node in task.fail_to_pass:
        path, _, rest = node.partition("::")
        by_file.setdefault(path, set()).add(re.split(r"::|\[", rest, maxsplit=1)[0])
    future: list[str] = []
    parts = []
    for path, names in by_file.items():
        # a task file at the expert's own path keeps its other tests: it writes over it
        text = _tested_text(task, repos_dir, path)
        head, body = _kept_tests(text, names) if path != MODEL_TEST_PATH else ([], text)
        future += [x for x in head if x not in future]
        parts.append(body)
    ids = [f"{MODEL_TEST_PATH}::{n.partition('::')[2]}" for n in task.fail_to_pass]
    return "".join(future) + "\n\n".join(parts), list(dict.fromkeys(ids))


def _tdd_opening(task: Task, repos_dir: str | Path | None) -> list[dict]:
    """Write the model's test file, then run it (it fails on the buggy tree)."""
    content, ids = model_test_module(task, repos_dir)
    return [{"tool": "write_file", "args": {"path": MODEL_TEST_PATH, "content": content}},
            {"tool": "run_tests", "args": {"selection": ids}}]


def _long(task: Task, repos_dir: str | Path | None, path: str, budget: int) -> bool:
    """Whether ``path`` is too long to read whole (unknown without the snapshot: no)."""
    if repos_dir is None:
        return False
    try:
        return not _fits(_tested_text(task, repos_dir, path), budget)
    except OSError:  # a file the statement names but the tree lacks: read_file says so
        return False


def expert_calls(
    task: Task,
    repos_dir: str | Path | None = None,
    slip: bool = False,
    tdd: bool = False,
    budget: int = BUDGET,
) -> list[dict]:
    """Tool calls ``{"tool": ..., "args": {...}}`` that solve ``task`` with its reference patch.

    With ``repos_dir`` the edits are the smallest unique ones (the base file is read from
    the snapshot) and a file longer than one observation of ``budget`` chars is searched
    and read by line range; without it each edit replaces a whole hunk of the patch and
    every file is read whole. ``slip``: the first edit is preceded by a wrong one; ``tdd``:
    it opens by writing and running its own test file (module docstring)."""
    files = split_files(task.patch)
    if not files:
        raise ValueError(f"task {task.task_id}: reference patch names no file")
    symptom = _module_of(task.fail_to_pass[0] if task.fail_to_pass else "", task)
    calls = _tdd_opening(task, repos_dir) if tdd else [{"tool": "run_tests", "args": {}}]
    if not _long(task, repos_dir, symptom, budget):
        calls.append({"tool": "read_file", "args": {"path": symptom}})
    function = task.metadata.get("mutation", {}).get("function", "").rsplit(".", 1)[-1]
    for path, lines in files.items():
        base = _buggy_text(task, repos_dir, path) if repos_dir is not None else None
        ranged = base is not None and not _fits(base, budget)
        if path != symptom or ranged:
            calls.append({"tool": "search", "args": {"pattern": _pattern(function, lines)}})
        if path != symptom and not ranged:
            calls.append({"tool": "read_file", "args": {"path": path}})
        text = base  # the file as the edits so far left it: where the next read looks
        for hunk in hunks(lines):
            old, new = _edit_strings(hunk, base)
            if ranged:
                start, end = _window(text, old, budget)
                calls.append({"tool": "read_file", "args": {"path": path, "start": start,
                                                            "end": end}})
                text = text.replace(old, new, 1)
            edit = {"tool": "edit", "args": {"path": path, "old": old, "new": new}}
            wrong = (
                _slip(task, edit, base) if slip and not any(c.get("slip") for c in calls) else None
            )
            calls += [wrong, edit] if wrong else [edit]
    calls.append({"tool": "run_tests", "args": {}})
    calls.append({"tool": "submit", "args": {}})
    return calls
