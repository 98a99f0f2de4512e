"""Hidden tests at test level for minted tasks: chosen FAIL_TO_PASS test functions are
moved out of their file into a hidden file of their own.

The workspace machinery hides whole files (codeloop.agent.workspace drops every file a
hidden node id lives in; the judge keeps them), so hiding single tests is an edit of the
task's ``test_patch``: the original test file loses the hidden functions (an AST-located
line cut, decorators included) and a new ``test_hidden_<stem>.py`` beside it holds them
together with the file's module-level code that is not a test (imports, fixtures,
helpers, constants), which they may need. Only top-level test functions move: a method
would drag its class along, and its siblings with it.
"""

from __future__ import annotations

import ast
import hashlib
from pathlib import Path

from codeloop.agent.patches import file_diff as tree_file_diff
from codeloop.data.repos.diffs import file_diff


def _func_name(node: str) -> tuple[str, str] | None:
    """(file, function) of a node id naming a top-level function (parametrized or not)."""
    path, sep, rest = node.partition("::")
    if not sep or "::" in rest.split("[", 1)[0]:
        return None
    return path, rest.split("[", 1)[0]


def _top_functions(text: str) -> dict[str, tuple[int, int]]:
    """Top-level function name -> (first line incl. decorators, last line), 1-based."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return {}
    out = {}
    for n in tree.body:
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef):
            first = min([n.lineno, *(d.lineno for d in n.decorator_list)])
            out[n.name] = (first, n.end_lineno)
    return out


def _is_test_stmt(n: ast.stmt) -> bool:
    if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef):
        return n.name.startswith("test")
    return isinstance(n, ast.ClassDef) and n.name.startswith("Test")


def _cut(lines: list[str], spans: list[tuple[int, int]]) -> str:
    drop = {i for a, b in spans for i in range(a - 1, b)}
    return "".join(x for i, x in enumerate(lines) if i not in drop)


def split_file(text: str, names: set[str]) -> tuple[str, str]:
    """(the file without the functions ``names``, the hidden file: the file's non-test
    module-level code plus those functions, in their original order)."""
    lines = text.splitlines(keepends=True)
    tree = ast.parse(text)
    spans = []
    for n in tree.body:
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name in names:
            spans.append((min([n.lineno, *(d.lineno for d in n.decorator_list)]), n.end_lineno))
    keep = []  # spans of the hidden file: non-test statements and the hidden functions
    for n in tree.body:
        first = min([n.lineno, *(d.lineno for d in getattr(n, "decorator_list", []))])
        if not _is_test_stmt(n) or (first, n.end_lineno) in spans:
            keep.append((first, n.end_lineno))
    hidden = []
    for a, b in keep:
        hidden += [*lines[a - 1 : b], "\n", "\n"]
    return _cut(lines, spans), "".join(hidden).rstrip("\n") + "\n"


def hidden_path(path: str) -> str:
    """The hidden file beside ``path`` (pytest collects it when named on the command line)."""
    p = Path(path)
    return str(p.with_name(f"test_hidden_{p.stem}.py"))


def choose_hidden(f2p: list[str], fraction: float, key: str, keep_visible: str,
                  root: Path) -> dict[str, set[str]]:
    """Test functions to hide, file -> names: top-level F2P functions chosen by hash,
    ``round(fraction * n)`` of the n candidates but never all F2P functions (the agent must
    see a failing test) and never the one the statement quotes (``keep_visible``)."""
    funcs = sorted({f for n in f2p if (f := _func_name(n))})
    quoted = _func_name(keep_visible)
    total = len(funcs)
    cands = []
    for path, name in funcs:
        if (path, name) == quoted or hidden_path(path) == path:
            continue
        text = (root / path).read_text() if (root / path).is_file() else ""
        if name in _top_functions(text) and not (root / hidden_path(path)).exists():
            cands.append((path, name))
    k = min(total - 1, len(cands), round(fraction * total))
    if k <= 0:
        return {}
    rank = sorted(
        cands, key=lambda c: hashlib.sha256(f"{key}\0{c[0]}::{c[1]}".encode()).hexdigest()
    )
    out: dict[str, set[str]] = {}
    for path, name in rank[:k]:
        out.setdefault(path, set()).add(name)
    return out


def hide_tests(root: Path, chosen: dict[str, set[str]]) -> tuple[str, dict[str, str]]:
    """(test_patch moving the ``chosen`` functions of the tree at ``root`` into hidden
    files, old node-id prefix -> new node-id prefix for each moved function)."""
    patch, moved = [], {}
    for path in sorted(chosen):
        text = (root / path).read_text()
        visible, hidden = split_file(text, chosen[path])
        new = hidden_path(path)
        patch.append(file_diff(path, text, visible))
        patch.append(tree_file_diff(new, None, hidden.encode(), 0, 0o100644))
        for name in chosen[path]:
            moved[f"{path}::{name}"] = f"{new}::{name}"
    return "".join(patch), moved


def rename_node(node: str, moved: dict[str, str]) -> str:
    """``node`` with its file changed when its function moved to a hidden file."""
    f = _func_name(node)
    if not f:
        return node
    head = f"{f[0]}::{f[1]}"
    return moved[head] + node[len(head) :] if head in moved else node
