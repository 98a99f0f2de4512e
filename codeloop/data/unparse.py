"""``ast.unparse``, faster, with the same output: the text of every split HumanEval test.

Loading a 1,138-task HumanEval file spent most of its time in ``ast.unparse`` (one call
per test statement), whose cost is the visitor's dispatch and its ``contextmanager``
helpers, not the text it writes. ``unparse`` here is the standard library's own unparser
(``ast._Unparser``, same precedence and quoting rules) with names and plain constants
written directly, dispatch without ``NodeVisitor.visit`` and the parenthesis helpers as
plain context objects. Everything else is the stock method, so the text cannot differ;
where the private class is missing it is ``ast.unparse`` itself.
"""

from __future__ import annotations

import ast

_Base = getattr(ast, "_Unparser", None)
_PLAIN = frozenset({int, bool, type(None)})  # repr(value) is their whole unparse


class _Delimit:
    """``_Unparser.delimit`` without a generator: ``start`` on entry, ``end`` on exit."""

    __slots__ = ("_u", "_start", "_end")

    def __init__(self, unparser: ast.NodeVisitor, start: str, end: str) -> None:
        self._u, self._start, self._end = unparser, start, end

    def __enter__(self) -> None:  # (written where the unparser writes now, as write() does)
        self._u._source.append(self._start)

    def __exit__(self, *exc: object) -> None:
        self._u._source.append(self._end)


class _Nothing:
    __slots__ = ()

    def __enter__(self) -> None:
        pass

    def __exit__(self, *exc: object) -> None:
        pass


_NOTHING = _Nothing()

if _Base is not None:

    class _FastUnparser(_Base):
        def traverse(self, node):  # noqa: ANN001 - the stdlib's signature
            cls = node.__class__
            if cls is ast.Name:  # visit_Name: write(node.id)
                self._source.append(node.id)
            elif (
                cls is ast.Constant
                and node.kind is None
                and (
                    node.value.__class__ in _PLAIN
                    or (node.value.__class__ is str and not self._avoid_backslashes)
                )
            ):  # visit_Constant -> _write_constant: write(repr(value))
                self._source.append(repr(node.value))
            elif cls is list:
                for item in node:
                    self.traverse(item)
            else:
                getattr(self, "visit_" + cls.__name__, self.generic_visit)(node)

        def delimit(self, start, end):  # noqa: ANN001, ANN201
            return _Delimit(self, start, end)

        def delimit_if(self, start, end, condition):  # noqa: ANN001, ANN201
            return _Delimit(self, start, end) if condition else _NOTHING

        def require_parens(self, precedence, node):  # noqa: ANN001, ANN201
            if self._precedences.get(node, ast._Precedence.TEST) > precedence:
                return _Delimit(self, "(", ")")
            return _NOTHING


def unparse(node: ast.AST) -> str:
    """Exactly ``ast.unparse(node)``."""
    if _Base is None:
        return ast.unparse(node)
    return _FastUnparser().visit(node)
