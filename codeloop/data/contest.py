"""APPS, TACO and CodeContests rows into a `Task` (stdin/stdout or call-based tests)."""

from __future__ import annotations

import json
from typing import Any

from codeloop.data.rows import LICENSES, MAX_TESTS, RowError, require
from codeloop.data.validate import defined_names
from codeloop.schema import Task


def _maybe_json(value: Any, name: str) -> Any:
    try:
        return (json.loads(value) if value.strip() else None) if isinstance(value, str) else value
    except json.JSONDecodeError as exc:
        raise RowError(name, f"{name} is not valid JSON: {exc}") from None


def _as_text(v: Any) -> str:
    return "\n".join(map(str, v)) if isinstance(v, list) else str(v)


def _contest_io(rec: dict) -> tuple[list, list, str]:
    """(inputs, outputs, fn_name) from APPS/TACO input_output or CodeContests *_tests."""
    if "input_output" in rec:
        io = _maybe_json(rec["input_output"], "input_output") or {}
        if not isinstance(io, dict):
            raise RowError("input_output", "input_output must be an object")
        return list(io.get("inputs") or []), list(io.get("outputs") or []), io.get("fn_name") or ""
    ins: list = []
    outs: list = []
    for name in ("public_tests", "private_tests", "generated_tests"):
        t = _maybe_json(rec.get(name), name) or {}
        ins += list(t.get("input") or [])
        outs += list(t.get("output") or [])
    return ins, outs, ""


def _contest_solution(rec: dict) -> str:
    sols = _maybe_json(rec.get("solutions"), "solutions")
    if isinstance(sols, dict):  # CodeContests: parallel lists; language 3 is PYTHON3
        langs, codes = sols.get("language") or [], sols.get("solution") or []
        py3 = [c for lang, c in zip(langs, codes, strict=False) if lang in (3, "PYTHON3")]
        return py3[0] if py3 else ""
    if isinstance(sols, list) and sols:
        return str(sols[0])
    return ""


def contest_task(rec: dict, row: int) -> Task:
    prompt = require(rec, "question", "description", "problem")
    solution = _contest_solution(rec)
    if not solution.strip():
        raise RowError("solutions", "no Python solution")
    ins, outs, fn_name = _contest_io(rec)
    if len(ins) != len(outs):
        raise RowError("input_output", f"{len(ins)} inputs but {len(outs)} outputs")
    if not ins:
        raise RowError("input_output", "no tests")
    n_all = len(ins)
    ins, outs = ins[:MAX_TESTS], outs[:MAX_TESTS]
    origin = "codecontests" if "public_tests" in rec else ("taco" if "source" in rec else "apps")
    original = rec.get("problem_id", rec.get("name", row))
    setup = ""
    if fn_name:  # call-based: args list -> assert fn(*args) == expected
        out = [o[0] if isinstance(o, list) and len(o) == 1 else o for o in outs]
        tests = [f"assert {fn_name}(*{a!r}) == {o!r}" for a, o in zip(ins, out, strict=True)]
        if "class Solution" in solution and fn_name not in defined_names(solution):
            setup = f"{fn_name} = Solution().{fn_name}"  # LeetCode-style method
    else:
        tests = [
            json.dumps({"input": _as_text(i), "output": _as_text(o)})
            for i, o in zip(ins, outs, strict=True)
        ]
    return Task(
        task_id=f"{origin}/{original}",
        source=origin,
        prompt=prompt,
        entry_point=fn_name,
        io_style="function" if fn_name else "stdio",
        reference_solution=solution,
        setup_code=setup,
        visible_tests=tests,
        metadata={
            "license": LICENSES[origin],
            "provenance": {"original_id": original},
            "tests_available": n_all,
            "source_difficulty": str(rec.get("difficulty", "")),
        },
    )
