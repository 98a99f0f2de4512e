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
