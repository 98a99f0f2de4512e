"""Split a test into what the child evaluates ("holes") and what the parent checks.

``assert f(x) == 3`` becomes hole ``f(x)`` (run in the child) and check ``_eq(_h0, 3)``
(run here on the returned plain value). The expected side never reaches the child.
An expression is *trusted* when it uses only literals, a small set of pure builtins and
stdlib constructors (``Counter``, ``math.isclose``...); the parent evaluates those itself.
Around a hole the parent only applies operations whose cost is bounded by the size of the
returned value (no ``*``, ``**``, ``%``). A hole is only ever a value the program computes
from the test's arguments: a cut-out part that would carry the test's logic into the child
(a comparison, a generator or lambda, both sides of ``f(a) == f(b)``), a test that is not a
single assert, and every test of a job with setup code, are planned ``eval``: the whole test
runs in the evaluator child, which never runs model code (see ``judge``).
"""

from __future__ import annotations

import ast
import collections
import decimal
import fractions
import json
import math
import re
from dataclasses import dataclass
from functools import lru_cache
from types import CodeType
from typing import Any

from codeloop.sandbox.values import values_equal

_SAFE_FUNCS = {
    "abs": abs, "all": all, "any": any, "bool": bool, "bytes": bytes, "complex": complex,
    "dict": dict, "divmod": divmod, "float": float, "frozenset": frozenset, "int": int,
    "isinstance": isinstance, "len": len, "list": list, "max": max, "min": min,
    "range": range, "reversed": reversed, "round": round, "set": set, "sorted": sorted,
    "str": str, "sum": sum, "tuple": tuple, "type": type, "zip": zip, "enumerate": enumerate,
    "ord": ord, "chr": chr, "Counter": collections.Counter,
    "OrderedDict": collections.OrderedDict, "defaultdict": collections.defaultdict,
    "deque": collections.deque, "Decimal": decimal.Decimal, "Fraction": fractions.Fraction,
    "isclose": math.isclose,
}
_SAFE_CONSTS = {"inf": math.inf, "nan": math.nan, "pi": math.pi, "e": math.e}
_SAFE_MODULES = {"math": math, "collections": collections, "decimal": decimal,
                 "fractions": fractions}
_HOLE_BINOPS = (ast.Add, ast.Sub, ast.Div, ast.FloorDiv, ast.BitAnd, ast.BitOr, ast.BitXor)
# inside a hole these would carry the test's own logic into the child
_TEST_LOGIC = (
    ast.Compare, ast.BoolOp, ast.IfExp, ast.Lambda, ast.GeneratorExp, ast.ListComp,
    ast.SetComp, ast.DictComp, ast.NamedExpr, ast.Await, ast.Yield, ast.YieldFrom,
)
_TRUSTED_NODES = (
    ast.Constant, ast.List, ast.Tuple, ast.Set, ast.Dict, ast.UnaryOp, ast.BinOp, ast.BoolOp,
    ast.Compare, ast.Call, ast.Attribute, ast.Subscript, ast.Slice, ast.Name, ast.keyword,
    ast.Load, ast.IfExp, ast.expr_context, ast.operator, ast.unaryop, ast.boolop, ast.cmpop,
)


@dataclass(frozen=True)
class Plan:
    """How one test is judged. kind: "holes" | "eval" | "stdio"."""

    kind: str
    source: str
    holes: tuple[str, ...] = ()
    check: CodeType | None = None
    stdin: str = ""
    expected_output: str = ""
    expected_src: str = ""  # the trusted side of `hole == expected`, for messages


def _node_trusted(sub: ast.AST, shadow: frozenset[str]) -> bool:
    """Whether this one node (not its children) may be evaluated by the parent."""
    if not isinstance(sub, _TRUSTED_NODES):
        return False
    if isinstance(sub, ast.Name):
        name = sub.id
        if name in shadow:
            return False
        if name not in _SAFE_FUNCS and name not in _SAFE_CONSTS:
            if name not in ("True", "False", "None") and name not in _SAFE_MODULES:
                return False
    elif isinstance(sub, ast.Attribute):
        base = sub.value
        if not (isinstance(base, ast.Name) and base.id in _SAFE_MODULES):
            return False
        if sub.attr.startswith("_"):
            return False
    elif isinstance(sub, ast.Call) and not _is_safe_callee(sub.func, shadow):
        return False
    return True


def _children(node: ast.AST) -> list[ast.AST]:
    """``ast.iter_child_nodes`` as a list, without its generator per field."""
    out = []
    for name in node._fields:
        value = getattr(node, name, None)
        if isinstance(value, ast.AST):
            out.append(value)
        elif isinstance(value, list):
            out += [x for x in value if isinstance(x, ast.AST)]
    return out


def _is_trusted(node: ast.AST, shadow: frozenset[str] = frozenset()) -> bool:
    """Whether the parent may evaluate ``node``: every node in it is trusted."""
    return all(_node_trusted(sub, shadow) for sub in ast.walk(node))


def _is_safe_callee(func: ast.AST, shadow: frozenset[str]) -> bool:
    if isinstance(func, ast.Name):
        return func.id in _SAFE_FUNCS and func.id not in shadow
    return (
        isinstance(func, ast.Attribute)
        and isinstance(func.value, ast.Name)
        and func.value.id in _SAFE_MODULES
        and not func.attr.startswith("_")
    )


_AT = {"lineno": 1, "col_offset": 0, "end_lineno": 1, "end_col_offset": 0}


def _new(cls: type, **fields: Any) -> Any:
    """A node for the parent's check, located (so no fix_missing_locations walk)."""
    return cls(**fields, **_AT)


def _text(source: str, node: ast.AST) -> str:
    """The node's own text in the test (unparse is the slow part of planning); several
    lines get parentheses so they stay one expression."""
    if "\n" not in source and source.isascii():  # offsets are bytes: equal to str indices
        return source[node.col_offset : node.end_col_offset]
    seg = ast.get_source_segment(source, node)
    if seg is None:
        return ast.unparse(node)
    return seg if "\n" not in seg else f"({seg})"


class _Splitter:
    def __init__(self, shadow: frozenset[str], source: str = "") -> None:
        self.source = source
        self.shadow = shadow
        self.holes: list[str] = []
        self.needs_eval = False
        # per node, keyed by the node itself (so it stays alive): every subtree is asked
        # about once, instead of one walk per question (planning was quadratic in depth)
        self._trusted: dict[ast.AST, bool] = {}
        self._logic: dict[ast.AST, bool] = {}

    def trusted(self, node: ast.AST) -> bool:
        """``_is_trusted(node)``, remembered for the node and each of its subtrees. (A hole
        only ever replaces an untrusted subtree by an untrusted one, so no answer changes.)"""
        cls = node.__class__
        if cls is ast.Constant or cls is ast.Name:  # most nodes; their children: none, a ctx
            return cls is ast.Constant or _node_trusted(node, self.shadow)
        known = self._trusted.get(node)
        if known is None:
            known = _node_trusted(node, self.shadow)
            for child in _children(node):  # every child, as _is_trusted walks them all
                known = self.trusted(child) and known
            self._trusted[node] = known
        return known

    def logic(self, node: ast.AST) -> bool:
        """Whether ``node`` or any node in it is test logic (``_TEST_LOGIC``), remembered."""
        if node.__class__ is ast.Constant or node.__class__ is ast.Name:
            return False
        known = self._logic.get(node)
        if known is None:
            known = isinstance(node, _TEST_LOGIC)
            for child in _children(node):
                known = self.logic(child) or known
            self._logic[node] = known
        return known

    def hole(self, node: ast.expr, merged: bool) -> ast.expr:
        """Cut ``node`` out for the child; ``merged``: it holds more than the program's part."""
        if merged or self.logic(node):
            self.needs_eval = True  # the child would see (and could answer) the check itself
        self.holes.append(_text(self.source, node))
        return _new(ast.Name, id=f"_h{len(self.holes) - 1}", ctx=ast.Load())

    def visit(self, node: ast.expr) -> ast.expr:
        """Return a parent-side expression; untrusted parts replaced by hole names."""
        if self.trusted(node):
            return node
        if isinstance(node, ast.BoolOp):
            return _new(ast.BoolOp, op=node.op, values=[self.visit(v) for v in node.values])
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.Not, ast.USub, ast.UAdd)):
            return _new(ast.UnaryOp, op=node.op, operand=self.visit(node.operand))
        if isinstance(node, ast.Compare):
            return self._compare(node)
        kids: list[ast.expr] = []
        if isinstance(node, ast.Call) and _is_safe_callee(node.func, self.shadow):
            if any(isinstance(a, ast.Starred) for a in node.args):
                return self.hole(node, merged=True)
            kids = list(node.args) + [k.value for k in node.keywords]
        elif isinstance(node, ast.BinOp) and isinstance(node.op, _HOLE_BINOPS):
            kids = [node.left, node.right]
        elif isinstance(node, ast.Subscript) and self.trusted(node.slice):
            kids = [node.value]
        else:
            return self.hole(node, merged=False)
        untrusted = [k for k in kids if not self.trusted(k)]
        if len(untrusted) > 1:
            return self.hole(node, merged=True)
        return _replace_child(node, untrusted[0], self.visit(untrusted[0]))

    def _compare(self, node: ast.Compare) -> ast.expr:
        operands = [node.left, *node.comparators]
        if sum(not self.trusted(o) for o in operands) > 1:
            return self.hole(node, merged=True)
        new = [self.visit(o) for o in operands]
        pairs = []
        for op, left, right in zip(node.ops, new, new[1:], strict=False):
            if isinstance(op, (ast.Eq, ast.NotEq)):
                eq = _new(ast.Name, id="_eq", ctx=ast.Load())
                call = _new(ast.Call, func=eq, args=[left, right], keywords=[])
                pairs.append(
                    call
                    if isinstance(op, ast.Eq)
                    else _new(ast.UnaryOp, op=ast.Not(), operand=call)
                )
            else:
                pairs.append(_new(ast.Compare, left=left, ops=[op], comparators=[right]))
        return pairs[0] if len(pairs) == 1 else _new(ast.BoolOp, op=ast.And(), values=pairs)


def _replace_child(parent: ast.expr, old: ast.expr, new: ast.expr) -> ast.expr:
    for name, value in ast.iter_fields(parent):
        if value is old:
            setattr(parent, name, new)
            return parent
        if isinstance(value, list):
            for i, item in enumerate(value):
                if item is old:
                    value[i] = new
                    return parent
                if isinstance(item, ast.keyword) and item.value is old:
                    item.value = new
                    return parent
    raise AssertionError("child not found")  # pragma: no cover - internal invariant


@lru_cache(maxsize=65536)
def plan_test(test: str, io_style: str = "function", shadow: frozenset[str] = frozenset()) -> Plan:
    """Plan one test string (cached: rollouts judge the same tests thousands of times).

    ``shadow``: names the program or setup defines; a test's ``sum(...)`` then means the
    program's function, not the builtin, and runs in the child.
    """
    if io_style == "stdio":
        try:
            obj = json.loads(test)
            stdin, expected = obj["input"], obj["output"]
        except (ValueError, TypeError, KeyError) as exc:
            raise ValueError(
                f"stdio test is not JSON {{input, output}}: {exc}: {test[:120]!r}"
            ) from None
        return Plan(kind="stdio", source=test, stdin=str(stdin), expected_output=str(expected))
    source = test.strip()
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return Plan(kind="eval", source=test)
    if len(tree.body) != 1 or not isinstance(tree.body[0], ast.Assert):
        return Plan(kind="eval", source=test)
    expected = ""
    original = tree.body[0].test
    splitter = _Splitter(shadow, source)
    if isinstance(original, ast.Compare) and len(original.ops) == 1:
        left, right = original.left, original.comparators[0]
        expected = _text(source, right if splitter.trusted(right) else left)
    expr = splitter.visit(original)
    if splitter.needs_eval:
        return Plan(kind="eval", source=test)
    code = compile(ast.Expression(body=expr), "<check>", "eval")
    return Plan("holes", test, tuple(splitter.holes), code, expected_src=expected)


_DEFINES = re.compile(
    r"^[ \t]*(?:async[ \t]+)?(?:def|class)[ \t]+(\w+)|^(\w+)[ \t]*(?::[^=\n]*)?=(?!=)", re.M
)
_SHADOWABLE = frozenset(_SAFE_FUNCS) | frozenset(_SAFE_CONSTS) | frozenset(_SAFE_MODULES)


def shadowed_names(*sources: str) -> frozenset[str]:
    """Safe names a program redefines (over-approximated: it only makes more holes).

    Imports are not counted: an imported ``isclose`` is the stdlib one the parent uses.
    """
    found: set[str] = set()
    for src in sources:
        if not src or not any(n in src for n in _SHADOWABLE):
            continue
        for m in _DEFINES.finditer(src):
            found.update(re.findall(r"\w+", " ".join(g for g in m.groups() if g)))
    return frozenset(found & _SHADOWABLE)


_ENV: dict[str, Any] = {**_SAFE_FUNCS, **_SAFE_CONSTS, **_SAFE_MODULES, "_eq": values_equal}


def evaluate_check(plan: Plan, values: list[Any]) -> bool:
    """Run the parent-side check on the (decoded, stdlib-only) hole values."""
    env = dict(_ENV)
    env["__builtins__"] = {}
    for i, v in enumerate(values):
        env[f"_h{i}"] = v
    return bool(eval(plan.check, env))  # noqa: S307 - trusted test text, plain-data values
