"""Canonical forms for verifying near-duplicate candidates (codeloop.data.dedupe).

MinHash over token shingles finds candidate pairs cheaply; this module decides them.
It is too slow to run on every document (an AST parse each), so dedupe runs it only on
documents that are in some LSH candidate pair.

Code: the solution's AST with docstrings dropped, top-level imports hoisted and sorted,
independent statements put in a canonical order, and identifiers blanked to ``_``.
Literals, operators, attribute names and unbound builtins (``len``, ``sorted``) keep
their identity: they carry the meaning, and they tell ``n ** 4`` from ``n ** 5``.
(Renaming by first occurrence was tried: two independent statements equal up to names,
``a = []; b = []``, get swapped names when reordered, so the blanked form is the one
that is exactly invariant; data flow between names is the information given up.)
Renaming, reformatting, comments and reordering of independent statements all vanish,
so a copy made that way has the *identical* canonical code.

Statement order: two statements of one body are dependent when they share a name (an
``ast.Name``); the canonical order is the linear extension of that dependency order
that greedily takes the smallest available statement by its rename-free dump. Swapping
two adjacent independent statements keeps the dependency order, hence the result.

Prompt: lowercased words; `distinguishing` gives the numbers and contrast words (ordinals,
odd/even, first/last, ...) that one prompt has and the other lacks: "sum of fourth
powers" and "sum of fifth powers" are different tasks however similar the text is.
"""

from __future__ import annotations

import ast
import builtins
import keyword
import re
from dataclasses import dataclass

import xxhash

_BUILTINS = frozenset(dir(builtins))
_KEEP = _BUILTINS | frozenset(keyword.kwlist)
_NAMED = re.compile(r"((?:Name\(id|arg\(arg|Def\(name)=)'[^']*'")
_TOKEN = re.compile(r"[A-Za-z_]\w*|\d[\w.]*|'(?:[^'\\\n]|\\.)*'|\"(?:[^\"\\\n]|\\.)*\"|\S")
_WORD = re.compile(r"[a-z]+|\d+")
_COMMENT = re.compile(r"#[^\n]*")
# Quick key tokens: attribute names whole (".append" keeps its identity), names, numbers,
# strings (either quote style), any other non-space character; "\\\n" and ";" are layout.
_QUICK = re.compile(
    r"\.\s*[A-Za-z_]\w*|[A-Za-z_]\w*|\d[\w.]*|'(?:[^'\\\n]|\\.)*'|\"(?:[^\"\\\n]|\\.)*\"|[^\s;\\]"
)

# Words whose substitution turns one task into another. Numbers are always included.
_CONTRAST = frozenset(
    """zero two three four five six seven eight nine ten hundred thousand
    first second third fourth fifth sixth seventh eighth ninth tenth last nth kth
    single double triple half twice odd even prime composite positive negative
    max maximum largest biggest highest greatest min minimum smallest lowest least
    sum product difference division quotient remainder average mean median mode
    increasing decreasing ascending descending upper uppercase lower lowercase
    left right front rear start end beginning begin ending prefix suffix
    add subtract multiply divide plus minus before after above below
    unique duplicate distinct equal unequal same different consecutive adjacent
    vowels consonants vowel consonant
    binary octal decimal hexadecimal square cube sphere cone cylinder circle
    triangle rectangle cuboid rhombus rombus parallelogram trapezium pentagon hexagon
    area perimeter volume lateral surface diameter radius circumference
    unset toggle""".split()
)


@dataclass(frozen=True)
class Canonical:
    """Canonical code text and its token shingles, plus the prompt's word set."""

    code: str
    shingles: frozenset
    words: frozenset


def _stmt_names(stmt: ast.AST) -> frozenset:
    return frozenset(n.id for n in ast.walk(stmt) if isinstance(n, ast.Name))


def _order(body: list[ast.stmt]) -> list[ast.stmt]:
    """Canonical order of one statement list (children first, see module docstring)."""
    for stmt in body:
        for attr in ("body", "orelse", "finalbody"):
            inner = getattr(stmt, attr, None)
            if isinstance(inner, list) and inner and isinstance(inner[0], ast.stmt):
                setattr(stmt, attr, _order(inner))
    if len(body) < 2:
        return body
    names = [_stmt_names(s) for s in body]
    keys = [_NAMED.sub(r"\1'_'", ast.dump(s)) for s in body]
    preds = [{i for i in range(j) if names[i] & names[j]} for j in range(len(body))]
    done: list[int] = []
    left = set(range(len(body)))
    while left:
        ready = [j for j in left if not (preds[j] & left)]
        j = min(ready, key=lambda j: (keys[j], j))
        done.append(j)
        left.discard(j)
    return [body[j] for j in done]


def _bound(tree: ast.AST) -> set[str]:
    out: set[str] = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load):
            out.add(n.id)
        elif isinstance(n, ast.arg):
            out.add(n.arg)
        elif isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            out.add(n.name)
        elif isinstance(n, ast.alias):
            out.add((n.asname or n.name).split(".")[0])
    return out


class _Blank(ast.NodeTransformer):
    """Every identifier -> "_" except unbound builtins (they carry meaning: len, sorted)."""

    def __init__(self, bound: set[str]):
        self.bound = bound

    def _new(self, name: str) -> str:
        return name if name in _BUILTINS and name not in self.bound else "_"

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

    visit_AsyncFunctionDef = visit_FunctionDef


def strip_docstrings(tree: ast.AST) -> ast.AST:
    """Drop the docstring of every module, class and function (in place)."""
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (
            isinstance(body, list)
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            node.body = body[1:] or [ast.Pass()]
    return tree


def canonical_code(code: str) -> str:
    """Canonical source of code (see module docstring); whitespace-collapsed if unparsable."""
    try:
        tree = strip_docstrings(ast.parse(code))
    except (SyntaxError, ValueError):
        return " ".join(code.split())
    imports = [s for s in tree.body if isinstance(s, ast.Import | ast.ImportFrom)]
    rest = [s for s in tree.body if not isinstance(s, ast.Import | ast.ImportFrom)]
    tree.body = sorted(imports, key=ast.dump) + _order(rest)
    tree = _Blank(_bound(tree)).visit(tree)
    try:
        return ast.unparse(tree)
    except (ValueError, RecursionError):
        return ast.dump(tree)


def code_shingles(canon: str, k: int = 3) -> frozenset:
    """k-grams of the canonical code's tokens plus each canonical line (order-free)."""
    toks = _TOKEN.findall(canon)
    grams = {tuple(toks[i : i + k]) for i in range(max(len(toks) - k + 1, 1))}
    return frozenset(grams | {line.strip() for line in canon.splitlines()})


def canonical(prompt: str, code: str) -> Canonical:
    """The canonical views of one task."""
    canon = canonical_code(code)
    return Canonical(canon, code_shingles(canon), frozenset(_WORD.findall(prompt.lower())))


def quick_key(code: str) -> tuple[int, int]:
    """Hashes of the code's token stream with names blanked, and with names kept.

    No parse; comments and layout are gone. Equal first keys mean the same tokens up to
    renaming, hence the same canonical code; equal second keys mean the same program
    (same names too), hence the same data flow. Parentheses are kept (they change
    meaning).
    """
    toks = _QUICK.findall(_COMMENT.sub("", code))
    out, exact = [], []
    for t in toks:
        c = t[0]
        if c == '"':
            t = "'" + t[1:-1] + "'"
        elif c == ".":
            t = "." + t[1:].strip()
        exact.append(t)
        if (c.isalpha() or c == "_") and t not in _KEEP:
            t = "_"
        out.append(t)
    return (
        xxhash.xxh64_intdigest("\0".join(out).encode()),
        xxhash.xxh64_intdigest("\0".join(exact).encode()),
    )


def prompt_words(prompt: str) -> frozenset:
    """Lowercased words and numbers of a prompt."""
    return frozenset(_WORD.findall(prompt.lower()))


def jaccard(a: frozenset, b: frozenset) -> float:
    """|a & b| / |a | b| (1.0 for two empty sets)."""
    union = len(a | b)
    return len(a & b) / union if union else 1.0


def distinguishing(a: frozenset, b: frozenset) -> frozenset:
    """Numbers and contrast words that exactly one of two prompts' word sets has."""
    return frozenset(w for w in a ^ b if w.isdigit() or w in _CONTRAST)


_BLOCKS = ("body", "orelse", "finalbody", "handlers", "cases")


def _leaves(node: ast.AST):
    """Name and arg nodes of one statement header (nested blocks excluded), in field order."""
    for field, value in ast.iter_fields(node):
        if isinstance(node, ast.stmt) and field in _BLOCKS:
            continue
        for child in value if isinstance(value, list) else [value]:
            if isinstance(child, ast.Name | ast.arg):
                yield child
            if isinstance(child, ast.AST) and not isinstance(child, ast.stmt):
                yield from _leaves(child)


def _head(stmt: ast.stmt) -> str:
    """The statement without its nested blocks, names blanked."""
    blocks = {f: getattr(stmt, f) for f in _BLOCKS if isinstance(getattr(stmt, f, None), list)}
    try:
        for f in blocks:
            setattr(stmt, f, [])
        return _NAMED.sub(r"\1'_'", ast.dump(stmt))
    finally:
        for f, v in blocks.items():
            setattr(stmt, f, v)


def flow_key(code: str) -> tuple:
    """Who-is-used-where, invariant to renaming and to the order of statements.

    Blanking names (`canonical_code`) forgets data flow: ``a - b`` and ``b - a`` blank
    alike, so "loss amount" and "profit amount" read as one program. Here each bound
    name gets the sorted list of its occurrences, each as (its statement header with
    names blanked, its index among that header's names); the key is the sorted list of
    those. Renaming and reordering statements change neither, swapping operands does.
    """
    try:
        tree = strip_docstrings(ast.parse(code))
    except (SyntaxError, ValueError):
        return (" ".join(code.split()),)
    # Only variables and arguments: imported modules and def/class names are left out
    # like builtins (a sloppy renamer renames ``re.sub`` to ``v3.sub`` or ``Node(..)``
    # to ``v9(..)`` but not the import or the class; their flow says little anyway).
    bound = {n.arg for n in ast.walk(tree) if isinstance(n, ast.arg)}
    bound |= {
        n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)
    }
    uses: dict[str, list] = {}
    for stmt in ast.walk(tree):
        if not isinstance(stmt, ast.stmt):
            continue
        names = list(_leaves(stmt))
        if not names:
            continue
        head = _head(stmt)
        for k, n in enumerate(names):
            name = n.id if isinstance(n, ast.Name) else n.arg
            if name in bound:
                uses.setdefault(name, []).append((head, k))
    return tuple(sorted(tuple(sorted(u)) for u in uses.values()))
