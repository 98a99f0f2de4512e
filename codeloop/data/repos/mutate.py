"""Single-site AST mutations of Python source (SWE-smith's procedural bugs).

Each candidate replaces one node's source segment with the unparsed mutated node, so
the rest of the file keeps its exact formatting (a diff of one or two lines, which the
problem statement never names). Operators: ``compare`` (comparison swap), ``arith``
(arithmetic operator swap), ``off_by_one`` (range/slice bounds +-1), ``constant`` (an
integer literal +1), ``condition`` (negated ``if`` test), ``swap_args`` (first two
positional arguments of a call), ``drop_stmt`` (a statement that is not the last of its
block becomes ``pass``), ``wrong_return`` (the returned expression replaced by the first
parameter, or None).
"""

from __future__ import annotations

import ast
import copy
from dataclasses import dataclass

OPERATORS = (
    "compare", "arith", "off_by_one", "constant", "condition", "swap_args", "drop_stmt",
    "wrong_return",
)

_CMP_SWAP = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt,
             ast.Eq: ast.NotEq, ast.NotEq: ast.Eq}
_ARITH_SWAP = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Add, ast.FloorDiv: ast.Mult,
               ast.Mod: ast.FloorDiv}


@dataclass(frozen=True)
class Mutation:
    """One candidate bug: replace source[start:end] (line/col span) with ``new``."""

    operator: str
    function: str  # enclosing function's qualified name ("" at module level)
    lineno: int
    col: int
    end_lineno: int
    end_col: int
    old: str
    new: str

    @property
    def site(self) -> str:
        """Where it is, for dedupe: the same site with another operator is another bug."""
        return f"{self.function}:{self.lineno}:{self.col}:{self.operator}"


def _span(blines: list[bytes], lineno: int, col: int, end_lineno: int, end_col: int):
    # ast's col offsets count UTF-8 bytes, so spans are cut from the encoded source
    start = sum(len(x) for x in blines[: lineno - 1]) + col
    end = sum(len(x) for x in blines[: end_lineno - 1]) + end_col
    return start, end


def _segment(blines: list[bytes], node: ast.AST) -> str:
    start, end = _span(blines, node.lineno, node.col_offset, node.end_lineno, node.end_col_offset)
    return b"".join(blines)[start:end].decode()


def apply_mutation(source: str, m: Mutation) -> str:
    """The source with mutation ``m`` applied (its span must still hold ``m.old``)."""
    data = source.encode()
    start, end = _span(data.splitlines(keepends=True), m.lineno, m.col, m.end_lineno, m.end_col)
    if data[start:end].decode(errors="replace") != m.old:
        raise ValueError(f"mutation {m.site}: the source no longer holds {m.old!r}")
    return (data[:start] + m.new.encode() + data[end:]).decode()


def _plus(node: ast.expr, delta: int) -> ast.expr:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return ast.Constant(node.value + delta)
    op = ast.Add() if delta > 0 else ast.Sub()
    return ast.BinOp(node, op, ast.Constant(abs(delta)))


def _variants(node: ast.AST, func: ast.FunctionDef | None):
    """(operator, replacement node) pairs for one node; the node itself is never changed."""
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _CMP_SWAP:
        new = copy.deepcopy(node)
        new.ops = [_CMP_SWAP[type(node.ops[0])]()]
        yield "compare", new
    elif isinstance(node, ast.BinOp) and type(node.op) in _ARITH_SWAP:
        new = copy.deepcopy(node)
        new.op = _ARITH_SWAP[type(node.op)]()
        yield "arith", new
    elif isinstance(node, ast.Call):
        if isinstance(node.func, ast.Name) and node.func.id == "range" and node.args:
            new = copy.deepcopy(node)
            stop = 0 if len(node.args) == 1 else 1
            new.args[stop] = _plus(new.args[stop], 1)
            yield "off_by_one", new
        pos = [a for a in node.args if not isinstance(a, ast.Starred)]
        if len(pos) >= 2 and ast.dump(pos[0]) != ast.dump(pos[1]):
            new = copy.deepcopy(node)
            new.args[0], new.args[1] = new.args[1], new.args[0]
            yield "swap_args", new
    elif isinstance(node, ast.Slice):
        for attr in ("lower", "upper"):
            bound = getattr(node, attr)
            if bound is not None:
                new = copy.deepcopy(node)
                setattr(new, attr, _plus(copy.deepcopy(bound), 1))
                yield "off_by_one", new
    elif isinstance(node, ast.Constant) and type(node.value) is int:
        yield "constant", ast.Constant(node.value + 1)
    elif isinstance(node, ast.If):
        yield "condition", ast.UnaryOp(ast.Not(), copy.deepcopy(node.test))
    elif isinstance(node, ast.Return) and node.value is not None and func is not None:
        params = [a.arg for a in func.args.args]
        first = params[0] if params else None
        if first and not (isinstance(node.value, ast.Name) and node.value.id == first):
            yield "wrong_return", ast.Name(first)
        else:
            yield "wrong_return", ast.Constant(None)


def _target(node: ast.AST) -> ast.AST:
    """The node whose source span a variant of ``node`` replaces (an if's test only)."""
    return (
        node.test
        if isinstance(node, ast.If)
        else (node.value if isinstance(node, ast.Return) else node)
    )


def _droppable(body: list[ast.stmt]) -> list[ast.stmt]:
    kinds = (ast.Assign, ast.AugAssign, ast.Expr, ast.AnnAssign)
    return [s for s in body[:-1] if isinstance(s, kinds) and not _is_docstring(s)]


def _is_docstring(s: ast.stmt) -> bool:
    return (
        isinstance(s, ast.Expr)
        and isinstance(s.value, ast.Constant)
        and isinstance(s.value.value, str)
    )


def find_mutations(source: str, functions: set[str] | None = None) -> list[Mutation]:
    """Every single-site mutation inside the functions of ``source`` (or only those named).

    Module-level code is left alone: mutating it breaks every import, not one behaviour."""
    tree = ast.parse(source)
    lines = source.encode().splitlines(keepends=True)
    out: list[Mutation] = []

    def visit_function(fn: ast.FunctionDef, qual: str) -> None:
        if functions is not None and qual not in functions:
            return
        # a signature's defaults and decorators are not the body's behaviour
        outside = {id(n) for d in [*fn.args.defaults, *fn.args.kw_defaults, *fn.decorator_list]
                   if d is not None for n in ast.walk(d)}
        for node in ast.walk(fn):
            if id(node) in outside:
                continue
            for op, new in _variants(node, fn) if node is not fn else ():
                tgt = _target(node)
                out.append(_make(op, qual, lines, tgt, ast.unparse(new)))
            body = getattr(node, "body", None)
            if isinstance(body, list):
                for s in _droppable(body):
                    out.append(_make("drop_stmt", qual, lines, s, "pass"))

    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            visit_function(node, node.name)
        elif isinstance(node, ast.ClassDef):
            for sub in node.body:
                if isinstance(sub, ast.FunctionDef):
                    visit_function(sub, f"{node.name}.{sub.name}")
    return sorted(set(out), key=lambda m: (m.lineno, m.col, m.operator, m.new))


def _make(op: str, qual: str, lines: list[bytes], node: ast.AST, new: str) -> Mutation:
    return Mutation(
        operator=op,
        function=qual,
        lineno=node.lineno,
        col=node.col_offset,
        end_lineno=node.end_lineno,
        end_col=node.end_col_offset,
        old=_segment(lines, node),
        new=new,
    )
