"""Near-duplicate planting for the dedupe benchmark (and synthetic corpora).

Each planted copy of a task applies edits a scraper would meet: identifiers renamed,
code reformatted, independent statements reordered, and the prompt copied with edits.
"""

from __future__ import annotations

import ast
import builtins
import keyword
import random

from codeloop.schema import Task

_KEEP = set(dir(builtins)) | set(keyword.kwlist)
_PROMPT_EDITS = [
    ("Write a function", "Write a python function"),
    ("Write a python function", "Create a function"),
    ("write a function", "implement a function"),
    ("the given", "a given"),
    ("find ", "compute "),
    ("check ", "test "),
    (" list", " list of values"),
    ("number", "integer"),
]


class _Renamer(ast.NodeTransformer):
    def __init__(self, rng: random.Random):
        self.rng, self.map = rng, {}

    def _new(self, name: str) -> str:
        if name in _KEEP or name.startswith("__"):
            return name
        if name not in self.map:
            self.map[name] = f"{self.rng.choice(['v', 'x', 'tmp', 'val', 'n'])}{len(self.map)}"
        return self.map[name]

    def visit_Name(self, node):
        node.id = self._new(node.id)
        return node

    def visit_arg(self, node):
        node.arg = self._new(node.arg)
        return node

    def visit_FunctionDef(self, node):
        node.name = self._new(node.name)
        self.generic_visit(node)
        return node


def _reorder(tree: ast.Module, rng: random.Random) -> None:
    """Swap one adjacent pair of statements that do not read each other's names."""
    bodies = [n.body for n in ast.walk(tree) if isinstance(getattr(n, "body", None), list)]
    rng.shuffle(bodies)
    for body in bodies:
        for i in range(len(body) - 1):
            a, b = body[i], body[i + 1]
            if isinstance(a, ast.Return | ast.FunctionDef) or isinstance(b, ast.Return):
                continue
            na = {n.id for n in ast.walk(a) if isinstance(n, ast.Name)}
            nb = {n.id for n in ast.walk(b) if isinstance(n, ast.Name)}
            if not (na & nb):
                body[i], body[i + 1] = b, a
                return


def plant_code(code: str, rng: random.Random) -> str:
    """A renamed, reordered and reformatted copy of code (unchanged if unparsable)."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return code
    if rng.random() < 0.8:
        tree = _Renamer(rng).visit(tree)
    if rng.random() < 0.6:
        _reorder(tree, rng)
    out = ast.unparse(tree)  # reformatting: quotes, spacing, parentheses all change
    if rng.random() < 0.5:
        out = out.replace("    ", "  ")
    if rng.random() < 0.3:
        out = "# copied solution\n" + out
    return out


def plant_prompt(text: str, rng: random.Random) -> str:
    """The prompt copied with one or two edits."""
    for _ in range(rng.randint(1, 2)):
        options = [(a, b) for a, b in _PROMPT_EDITS if a in text]
        if options and rng.random() < 0.7:
            a, b = rng.choice(options)
            text = text.replace(a, b, 1)
        else:
            text = text.rstrip(".") + rng.choice([".", " please.", " efficiently.", "!"])
    return text


def plant_duplicates(tasks: list[Task], n: int, seed: int = 0) -> list[tuple[Task, str]]:
    """n planted near-duplicates as (task, id of the task it copies)."""
    rng = random.Random(seed)
    out = []
    for k in range(n):
        src = rng.choice(tasks)
        dup = Task(
            task_id=f"planted/{k}",
            source=src.source,
            prompt=plant_prompt(src.prompt, rng),
            entry_point=src.entry_point,
            reference_solution=plant_code(src.reference_solution, rng),
            setup_code=src.setup_code,
            visible_tests=list(src.visible_tests),
            metadata={"planted_from": src.task_id},
        )
        out.append((dup, src.task_id))
    return out


# --- natural duplicates: an independent ground truth for a real corpus ---------------

_CROSS = r'''
import io as _io, signal as _signal, sys as _sys


class _Late(Exception):
    pass


def _late(*_):
    raise _Late()


def _cross(j):
    """Run candidate j's setup and tests with this reference under j's entry point."""
    name, setup, tests = _CANDS[j]
    g = dict(_BASE)
    g[name] = g["candidate"] = _ENTRY
    out, _sys.stdout = _sys.stdout, _io.StringIO()
    _signal.signal(_signal.SIGALRM, _late)
    _signal.setitimer(_signal.ITIMER_REAL, 0.25)
    try:
        exec(setup, g)
        for t in tests:
            exec(t, g)
    finally:
        _signal.setitimer(_signal.ITIMER_REAL, 0)
        _sys.stdout = out
'''


def _arity(task: Task) -> tuple[int, float] | None:
    """(min, max) positional arguments of the reference's entry point; None if unknown."""
    try:
        tree = ast.parse(task.reference_solution)
    except SyntaxError:
        return None
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == task.entry_point:
            a = node.args
            n = len(a.posonlyargs) + len(a.args)
            return n - len(a.defaults), float("inf") if a.vararg else n
    return None


def _call_arities(task: Task) -> set[int] | None:
    """Positional-argument counts of the calls to the entry point in the task's tests."""
    out: set[int] = set()
    for t in task.all_tests():
        try:
            tree = ast.parse(t)
        except SyntaxError:
            return None
        for n in ast.walk(tree):
            if isinstance(n, ast.Call) and getattr(n.func, "id", None) == task.entry_point:
                if n.keywords or any(isinstance(a, ast.Starred) for a in n.args):
                    return None
                out.add(len(n.args))
    return out


def natural_twins(tasks: list[Task], executor) -> set[tuple[int, int]]:
    """Pairs (i, j), i < j, of tasks whose references behave identically on the union of
    both tasks' tests: each reference, bound to the other's entry point, passes the
    other's setup and tests (run in the sandbox, one run per candidate). Only a call-arity
    check prunes candidates; no text similarity is used, so this truth is independent
    of the deduper under test.
    """
    from codeloop.sandbox import ExecJob

    ar = [_arity(t) for t in tasks]
    calls = [_call_arities(t) for t in tasks]
    jobs, cands = [], []
    for i, t in enumerate(tasks):
        lo, hi = ar[i] if ar[i] else (0, float("inf"))
        js = [j for j in range(len(tasks)) if j != i and calls[j] is not None and calls[j]]
        js = [j for j in js if all(lo <= c <= hi for c in calls[j])]
        data = {j: (tasks[j].entry_point, tasks[j].setup_code, tasks[j].all_tests()) for j in js}
        code = "\n".join([t.reference_solution, _CROSS, f"_CANDS = {data!r}",
                          f"_ENTRY = {t.entry_point}", "_BASE = dict(globals())"])
        jobs.append(ExecJob(code, [f"_cross({j})" for j in js], t.setup_code, "function",
                            t.entry_point, timeout_s=60))
        cands.append(js)
    results = executor.run_many(jobs)
    passes = set()
    for i, (js, res) in enumerate(zip(cands, results, strict=True)):
        ok = {r.index for r in res.test_results if r.passed}
        passes |= {(i, js[k]) for k in ok}
    return {(i, j) for i, j in passes if i < j and (j, i) in passes}
