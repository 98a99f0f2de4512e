"""The house's layering: no import cycle, nothing in the library imports a stage."""

from __future__ import annotations

import ast
from pathlib import Path

from codeloop.ops.dvc_deps import module_file, module_name

REPO = Path(__file__).resolve().parents[1]


def _graph() -> dict[str, set[str]]:
    """Module -> repo modules it imports (anywhere in its body). ``from pkg import sub``
    counts as an edge to ``pkg.sub`` only when ``sub`` is a module."""
    graph = {}
    for path in sorted((REPO / "codeloop").rglob("*.py")):
        name = module_name(REPO, path)
        mods = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                mods |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module:
                subs = {f"{node.module}.{a.name}" for a in node.names}
                subs = {s for s in subs if module_file(REPO, s)}
                mods |= subs or {node.module}
        found = {module_file(REPO, m) for m in mods}
        graph[name] = {module_name(REPO, f) for f in found if f} - {name}
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str]:
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(v: str) -> list[str]:
        state[v] = 1
        path.append(v)
        for w in sorted(graph.get(v, ())):
            if state.get(w) == 1:
                return path[path.index(w) :] + [w]
            if w not in state and (found := visit(w)):
                return found
        state[v] = 2
        path.pop()
        return []

    for v in sorted(graph):
        if v not in state and (found := visit(v)):
            return found
    return []


def test_no_library_module_imports_itself_back_through_others():
    assert _cycle(_graph()) == []


def test_nothing_in_the_library_imports_a_stage():
    up = {
        m: sorted(d for d in deps if d.startswith("codeloop.stages"))
        for m, deps in _graph().items()
        if not m.startswith("codeloop.stages")
    }
    assert {m: d for m, d in up.items() if d} == {}
