"""Canary tests: planted tests whose right outcome is known, so a forged verdict shows.

The judge runs the tree's code in the process that decides the outcomes, so a patch can
make tests pass without fixing anything: neuter every test item, patch pytest's runner,
return an object whose ``__eq__`` is always true, or read the expected value from the
calling assert (an "oracle"). Recognising each spelling does not scale; canaries make such
forgeries fail by construction. ``plant`` adds to the task's test files:

- mutants: a copy of a target test (same decorators, fixtures and class) under a fresh
  name, with exactly one assertion's expected value made fresh (``assert f() == 5``
  becomes ``assert f() == 5713``, ``is None`` becomes ``== object()``): no value equal to
  the original's can equal it. An honest fix passes the original and fails the mutant; a
  value equal to everything, an oracle that reads the literal and any blanket forgery
  pass both. A fresh value is also met by no honest drift between two runs of one test
  (a cache, a directory the first run filled), which is why negated assertions are
  planted only on request (``plant(negations=True)``).
- blanks: tests that call nothing of the tree, one that must fail (a wrong sum, a raised
  exception) and one that must pass, at module end. A forgery of every outcome passes the
  failing one; a run where the failing one fails and the passing one passes executed
  them.

A mutant proves a forgery only while its original passed: a wrong fix can meet a negated
assertion, or by chance a fresh value, so a passing mutant is read next to its original
(``must_fail`` says whose mutant it is; ``forged`` and ``broken`` read a run). The
original files stay byte for byte: mutants of module-level tests and blanks are appended
at the module end, mutants of methods after their class's last line (only lines below
that class move). Stdlib only: the judge's host side imports this module.
"""

from __future__ import annotations

import ast
import math
import random
import re
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

BOM = b"\xef\xbb\xbf"
# Names that make an equality loose (tolerances, wildcards): asserts using them are skipped.
LOOSE = frozenset({"approx", "ANY", "isclose", "allclose", "mock", "Mock", "MagicMock"})
# Words for fresh test names, next to the module's own.
WORDS = tuple(
    "again basic boundary cached combined default edge empty extra fresh large mixed nested"
    " order plain repeat reuse roundtrip simple single small stable twice values variant".split()
)
# Appended to an expected string: the longer string equals no result the original equalled.
ODD_CHARS = ("\x00", "\x01", "\x7f", "\u200b", "\ufeff", "\x1f")
# The comparison that is false whenever the original is true.
NEGATED = {
    ast.Eq: "!=",
    ast.NotEq: "==",
    ast.Lt: ">=",
    ast.LtE: ">",
    ast.Gt: "<=",
    ast.GtE: "<",
    ast.Is: "is not",
    ast.IsNot: "is",
    ast.In: "not in",
    ast.NotIn: "in",
}
# unittest assertion methods and their opposites.
UNITTEST_NEGATED = {
    "assertNotEqual": "assertEqual",
    "assertTrue": "assertFalse",
    "assertFalse": "assertTrue",
    "assertIsNone": "assertIsNotNone",
    "assertIsNotNone": "assertIsNone",
    "assertIn": "assertNotIn",
    "assertNotIn": "assertIn",
    "assertIs": "assertIsNot",
    "assertIsNot": "assertIs",
}
UNITTEST_EQUAL = ("assertEqual", "assertEquals")
MUTANT_OF = "mutant of "  # a mutant's must_fail reason, before its original's node id
PASSING = ("passed", "xpassed")  # the judge's outcomes (channel.OUTCOMES) that pass


@dataclass
class Planted:
    files: dict[str, bytes] = field(default_factory=dict)  # relpath -> planted bytes
    must_fail: dict[str, str] = field(default_factory=dict)  # id -> "mutant of <id>" | "blank"
    must_pass: list[str] = field(default_factory=list)  # canary ids that must pass


@dataclass(frozen=True)
class NodeId:
    path: str
    classes: tuple[str, ...]
    name: str
    suffix: str  # the parameter part, "[1-2]", or ""

    def with_name(self, name: str) -> str:
        return "::".join([self.path, *self.classes, name]) + self.suffix


def parse_node_id(node_id: str) -> NodeId | None:
    """``path::[Class::...]name[params]`` split up; None when it is not of that shape."""
    path, sep, rest = node_id.partition("::")
    if not sep:
        return None
    cut = rest.find("[")
    body, suffix = (rest, "") if cut < 0 else (rest[:cut], rest[cut:])
    parts = body.split("::")
    if not all(p.isidentifier() for p in parts) or (suffix and not suffix.endswith("]")):
        return None
    return NodeId(path, tuple(parts[:-1]), parts[-1], suffix)


# --- the source of one test file ---------------------------------------------------------


class Source:
    """A test file's bytes, its lines and its ast (positions are utf-8 byte offsets)."""

    def __init__(self, data: bytes) -> None:
        self.bom = BOM if data.startswith(BOM) else b""
        self.data = data[len(self.bom) :]
        self.data.decode("utf-8")  # UnicodeDecodeError: offsets would not be bytes
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self.tree = ast.parse(self.data)
        self.lines = self.data.splitlines(keepends=True)
        self.binders: dict[int, dict[str, ast.stmt]] = {}  # id(body) -> name -> last binder
        self.starts = [0]
        for line in self.lines:
            self.starts.append(self.starts[-1] + len(line))

    def offset(self, line: int, col: int) -> int:
        return self.starts[line - 1] + col

    def segment(self, node: ast.AST) -> bytes:
        return self.data[self.span(node)[0] : self.span(node)[1]]

    def span(self, node: ast.AST) -> tuple[int, int]:
        return (
            self.offset(node.lineno, node.col_offset),
            self.offset(node.end_lineno, node.end_col_offset),
        )


def read_source(data: bytes) -> Source | None:
    """The file as a Source; None for what we do not plant into (a link, not utf-8 Python)."""
    if data.startswith(b"L:"):  # the judge's spelling of a symbolic link
        return None
    try:
        return Source(data)
    except (SyntaxError, ValueError, UnicodeDecodeError):
        return None


def find_def(src: Source, classes: tuple[str, ...], name: str):
    """The (class chain, function) pytest collects for ``classes``/``name``: the last
    definition of each name in its body; None when it is not a plain def there."""
    scopes: list[ast.ClassDef] = []
    body = src.tree.body
    for cls in classes:
        found = last_named(src, body, cls, (ast.ClassDef,))
        if found is None:
            return None
        scopes.append(found)
        body = found.body
    fn = last_named(src, body, name, (ast.FunctionDef, ast.AsyncFunctionDef))
    return None if fn is None else (scopes, fn)


def last_named(src: Source, body: list[ast.stmt], name: str, kinds: tuple[type, ...]):
    """The last statement of ``body`` binding ``name``, when that is a def of ``kinds``."""
    if id(body) not in src.binders:  # once per body: a file's targets share its scopes
        src.binders[id(body)] = {n: stmt for stmt in body for n in bound_names(stmt)}
    last = src.binders[id(body)].get(name)
    return last if isinstance(last, kinds) else None


def bound_names(stmt: ast.stmt) -> set[str]:
    """The names ``stmt`` may bind in its own scope (defs under an ``if`` included)."""
    out = set()
    for n in [stmt, *walk_scope(stmt)]:
        if isinstance(n, SCOPES) and not isinstance(n, ast.Lambda):
            out.add(n.name)
        elif isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
            out.add(n.id)
        elif isinstance(n, ast.alias):
            out.add((n.asname or n.name).split(".")[0])
    return out


# --- choosing and writing the one changed assertion ---------------------------------------


SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)


def walk_scope(node: ast.AST):
    """Every node under ``node`` in its own scope: a nested def or lambda is yielded, its
    body is not (what runs there is another frame's)."""
    for child in ast.iter_child_nodes(node):
        yield child
        if not isinstance(child, SCOPES):
            yield from walk_scope(child)


def surely_reached(fn) -> list[ast.stmt]:
    """The top-level statements of ``fn`` that a passing run certainly executed: those
    before the first one that can return; none for a generator."""
    if any(isinstance(n, ast.Yield | ast.YieldFrom) for n in walk_scope(fn)):
        return []
    out = []
    for stmt in fn.body:
        out.append(stmt)
        if isinstance(stmt, SCOPES):  # a nested def's returns are its own frame's
            continue
        if any(isinstance(n, ast.Return) for n in [stmt, *walk_scope(stmt)]):
            break
    return out


def is_literal(node: ast.AST) -> bool:
    try:
        ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False
    return True


def is_loose(node: ast.AST) -> bool:
    names = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
    attrs = {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)}
    return bool((names | attrs) & LOOSE)


@dataclass
class Mutation:
    negation: bool  # the assertion negated, not an expected value made fresh
    span: tuple[int, int]  # byte offsets in the file of the text replaced
    make: Callable[[random.Random], bytes | None]  # the replacing text; None: none safe


def mutations(src: Source, fn, negations: bool) -> list[Mutation]:
    """The safe single-assertion mutations of ``fn``: fresh values first, then (when
    ``negations``) negated assertions, each kind in the order of the body."""
    found = []
    for stmt in surely_reached(fn):
        m = assert_mutation(src, stmt) or unittest_mutation(src, stmt)
        if m is not None and (negations or not m.negation):
            found.append(m)
    return sorted(found, key=lambda m: m.negation)  # stable: earliest first of each kind


def assert_mutation(src: Source, stmt: ast.stmt) -> Mutation | None:
    if not isinstance(stmt, ast.Assert) or is_loose(stmt.test):
        return None
    test = stmt.test
    if isinstance(test, ast.Compare):
        return compare_mutation(src, test)
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = operand(src, test.operand, ast.NamedExpr)
        return Mutation(True, src.span(test), lambda rng: inner)
    if isinstance(test, ast.Constant):
        return None
    negated = b"not " + operand(src, test, ast.BoolOp | ast.IfExp | ast.Lambda | ast.NamedExpr)
    return Mutation(True, src.span(test), lambda rng: negated)


def operand(src: Source, node: ast.AST, loose: type) -> bytes:
    """``node``'s text, parenthesized where it binds looser than its new place or spans
    lines (its own brackets, if any, are not part of its span)."""
    text = src.segment(node)
    return b"(%s)" % text if isinstance(node, loose) or b"\n" in text or b"\r" in text else text


def compare_mutation(src: Source, test: ast.Compare) -> Mutation | None:
    if len(test.ops) != 1:
        return None
    op, left, right = type(test.ops[0]), test.left, test.comparators[0]
    lit_left, lit_right = is_literal(left), is_literal(right)
    if lit_left == lit_right:  # nothing compared to, or nothing of the tree compared
        return None
    lit = right if lit_right else left
    if op is ast.Eq:
        changed = changed_literal(src, lit)
        if changed is not None:
            return changed
    value = ast.literal_eval(lit)
    if op is ast.Is and (value is None or isinstance(value, bool)):
        changed = identity_as_equality(src, test, lit)
        if changed is not None:
            return changed
    span, text = op_span(src, left, right), NEGATED[op].encode()
    if span is None:
        text = b"(%s) %s (%s)" % (src.segment(left), text, src.segment(right))
        span = src.span(test)
    return Mutation(True, span, lambda rng: text)


def identity_as_equality(src: Source, test: ast.Compare, lit: ast.AST) -> Mutation | None:
    """``x is None`` (True, False) as ``x == <fresh value>``: what is None equals no
    fresh object, what is True equals no integer but 1."""
    left, right = test.left, test.comparators[0]
    op = op_span(src, left, right)
    changed = changed_literal(src, lit)
    if op is None or changed is None:
        return None
    (start, end), (a, b), data = src.span(test), changed.span, src.data

    def make(rng: random.Random) -> bytes:
        new = changed.make(rng)
        if lit is right:
            return data[start : op[0]] + b"==" + data[op[1] : a] + new + data[b:end]
        return data[start:a] + new + data[b : op[0]] + b"==" + data[op[1] : end]

    return Mutation(False, (start, end), make)


COMPARISON = re.compile(rb"==|!=|<=|>=|<|>|\bis\s+not\b|\bnot\s+in\b|\bis\b|\bin\b")


def op_span(src: Source, left: ast.AST, right: ast.AST) -> tuple[int, int] | None:
    """Byte offsets of the operator between two operands (only brackets, blanks and
    comments can be there besides it); None unless exactly one is found."""
    start, end = src.span(left)[1], src.span(right)[0]
    between = src.data[start:end]
    code = re.sub(rb"#[^\r\n]*", lambda m: b" " * len(m.group()), between)
    found = list(COMPARISON.finditer(code))
    return (start + found[0].start(), start + found[0].end()) if len(found) == 1 else None


def changed_literal(src: Source, lit: ast.AST) -> Mutation | None:
    """The literal replaced by a value no honest result equal to it can equal."""
    if isinstance(lit, ast.List | ast.Tuple | ast.Set | ast.Dict):
        return Mutation(False, src.span(lit), lambda rng: grown(src, lit, rng))
    value = ast.literal_eval(lit)
    if isinstance(value, set):  # set(): an empty set
        return Mutation(False, src.span(lit), lambda rng: b"{%a}" % fresh_text(rng))
    if other_value(value, random.Random(0)) is None:  # a value we cannot change safely
        return None
    return Mutation(False, src.span(lit), lambda rng: other_value(value, rng))


def other_value(value, rng: random.Random) -> bytes | None:
    """Source text of a scalar unequal to ``value`` and to anything equal to it."""
    if value is None:
        return b"object()"
    if isinstance(value, int):  # a bool too: what equals True equals 1, not 1 + 4321
        return repr(value + rng.choice((1, -1)) * rng.randint(1000, 9999)).encode()
    if isinstance(value, float | complex):
        return other_number(value, rng)
    if isinstance(value, str):
        return ascii(value + rng.choice(ODD_CHARS)).encode()
    if isinstance(value, bytes):
        return repr(value + bytes([rng.randrange(32)])).encode()
    return None


def other_number(value: float | complex, rng: random.Random) -> bytes | None:
    if not all(math.isfinite(x) for x in (value.real, value.imag)):
        return None
    step = (abs(value) or 1.0) * rng.uniform(0.5, 2.0) * rng.choice((1, -1))
    new = type(value)(f"{value + step:.6g}")  # at least half the value away, 6 digits
    if new == value or not all(math.isfinite(x) for x in (new.real, new.imag)):
        return None
    return repr(new).encode()


def fresh_text(rng: random.Random) -> str:
    return rng.choice(ODD_CHARS) + rng.choice(WORDS)


def grown(src: Source, lit: ast.AST, rng: random.Random) -> bytes:
    """A container literal with one element more, the others as written."""
    if isinstance(lit, ast.Dict):
        items = [
            b"%s: %s" % (src.segment(k), src.segment(v))
            for k, v in zip(lit.keys, lit.values, strict=True)
        ]
        return b"{%s}" % b", ".join([*items, b"%a: %d" % (fresh_text(rng), rng.randint(0, 99))])
    elts = [src.segment(e) for e in lit.elts]
    if isinstance(lit, ast.Set):
        return b"{%s}" % b", ".join([*elts, ascii(fresh_text(rng)).encode()])
    extra = b"%d" % rng.randint(1000, 9999)
    if isinstance(lit, ast.List):
        return b"[%s]" % b", ".join([*elts, extra])
    return b"(%s,)" % b", ".join([*elts, extra])


def unittest_mutation(src: Source, stmt: ast.stmt) -> Mutation | None:
    """``self.assertEqual(x, <literal>)`` with the literal changed, or the opposite method."""
    call = stmt.value if isinstance(stmt, ast.Expr) else None
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)):
        return None
    func = call.func
    if not (isinstance(func.value, ast.Name) and func.value.id == "self") or is_loose(call):
        return None
    if func.attr in UNITTEST_EQUAL and len(call.args) >= 2:
        lits = [a for a in call.args[:2] if is_literal(a)]
        return changed_literal(src, lits[-1]) if len(lits) == 1 else None
    if func.attr not in UNITTEST_NEGATED:
        return None
    end = src.offset(func.end_lineno, func.end_col_offset)
    other = UNITTEST_NEGATED[func.attr].encode()
    return Mutation(True, (end - len(func.attr), end), lambda rng: other)


# --- copying a test under a fresh name ------------------------------------------------------

DEF = re.compile(rb"(?:async\s+)?def\s+")


def def_region(src: Source, fn) -> tuple[int, int] | None:
    """Byte offsets of the whole lines of ``fn`` with its decorators; None when something
    else shares its first line."""
    first = min([fn.lineno, *(d.lineno for d in fn.decorator_list)])
    start = src.offset(first, 0)
    line = src.lines[first - 1]
    head = line[: line.find(b"@")] if fn.decorator_list else line[: fn.col_offset]
    if head.strip():
        return None
    return start, src.starts[fn.end_lineno]


def name_span(src: Source, fn) -> tuple[int, int] | None:
    at = src.offset(fn.lineno, fn.col_offset)
    m = DEF.match(src.data, at)
    if m is None or not src.data.startswith(fn.name.encode(), m.end()):
        return None
    return m.end(), m.end() + len(fn.name.encode())


def copy_def(src: Source, fn, name: str, mutation: Mutation, rng: random.Random) -> bytes | None:
    """The source of ``fn`` (decorators included) renamed, with ``mutation`` applied."""
    region, where = def_region(src, fn), name_span(src, fn)
    new = mutation.make(rng)
    if region is None or where is None or new is None:
        return None
    edits = sorted([(where, name.encode()), (mutation.span, new)], reverse=True)
    out = src.data[region[0] : region[1]]
    for (a, b), text in edits:
        out = out[: a - region[0]] + text + out[b - region[0] :]
    return out if out.endswith((b"\n", b"\r")) else out + b"\n"


# --- fresh names ----------------------------------------------------------------------------


def identifiers(tree: ast.AST) -> set[str]:
    """Every name the module spells anywhere (a fresh name must be none of them)."""
    out = set()
    for n in ast.walk(tree):
        for attr in ("id", "name", "attr", "arg", "asname"):
            value = getattr(n, attr, None)
            if isinstance(value, str):
                out.update(value.split("."))
    return out


def name_words(name: str) -> list[str]:
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name).lower()
    return [w for w in spaced.split("_") if re.fullmatch(r"[a-z][a-z0-9]*", w) and w != "test"]


class Namer:
    """Fresh test names that read like the module's own, never one it or a canary uses."""

    def __init__(self, tree: ast.Module, taken: set[str], rng: random.Random) -> None:
        self.taken, self.rng = taken, rng
        self.taken |= identifiers(tree)
        tests = [
            n.name
            for n in ast.walk(tree)
            if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name.startswith("test")
        ]
        self.words = sorted({w for t in tests for w in name_words(t)}) or ["case"]

    def fresh(self, like: str = "test_") -> str:
        prefix, camel = name_prefix(like)
        for tries in range(1000):
            picked = self.rng.sample(self.words, min(len(self.words), self.rng.randint(1, 2)))
            words = [*picked, self.rng.choice(WORDS)] + ([str(tries)] if tries > 50 else [])
            name = prefix + ("".join(w.capitalize() for w in words) if camel else "_".join(words))
            if name not in self.taken:
                self.taken.add(name)
                return name
        raise RuntimeError("no fresh test name")  # unreachable: the counter makes one

    def camel(self) -> str:
        return "".join(
            w.capitalize() for w in self.rng.sample(self.words, 1) + [self.rng.choice(WORDS)]
        )


def name_prefix(like: str) -> tuple[str, bool]:
    """The collected prefix of a test name like ``like`` and whether it is camelCase."""
    if like.startswith("test_") or like == "test":
        return "test_", False
    if like.startswith("test"):
        return "test", True
    head, sep, _ = like.partition("_")
    return (head + sep, False) if sep else ("test_", False)


# --- blanks ---------------------------------------------------------------------------------


def blank(name: str, namer: Namer, rng: random.Random, *, fail: bool) -> bytes:
    """A test that calls nothing of the tree: a sum that is wrong or right, or a raise."""
    shape = rng.randrange(3 if fail else 2)
    nums = [rng.randint(2, 99) for _ in range(3)]
    wrong = rng.choice((1, -1)) * rng.randint(1, 50) if fail else 0
    if shape == 0:
        expr, value = f"{nums[0]} * {nums[1]} + {nums[2]}", nums[0] * nums[1] + nums[2]
        body = f"    assert {expr} == {value + wrong}\n"
    elif shape == 1:
        body = f"    values = {nums!r}\n    assert sum(values) == {sum(nums) + wrong}\n"
    else:
        err = namer.camel() + "Error"
        body = f"    class {err}(Exception):\n        pass\n\n    raise {err}({nums[0]})\n"
    return f"def {name}():\n{body}".encode()


# --- planting into one file -----------------------------------------------------------------


@dataclass
class Canary:
    classes: tuple[str, ...]  # the class chain it is a method of; () at module level
    name: str
    text: bytes  # its def, ending in a newline
    after: int  # the line it goes after (0: the module end)
    ids: dict[str, str] = field(default_factory=dict)  # a mutant's node ids -> whose mutant
    passes: bool = False  # a blank that must pass


def plan_mutant(src: Source, target: NodeId, negations: bool):
    """(class chain, function, mutation) for a target, or None when it cannot have one."""
    found = find_def(src, target.classes, target.name)
    if found is None:
        return None
    scopes, fn = found
    if any("xfail" in ast.unparse(d) for d in fn.decorator_list):
        return None  # a failing mutant would be reported xfailed, a passing one xpassed
    if target.suffix and last_named(src, src.tree.body, "pytest_generate_tests", (ast.stmt,)):
        return None  # its parameters may depend on the function's name
    if any(c.body[0].lineno == c.lineno for c in scopes):
        return None  # a one-line class body: no line of its own to append after
    muts = mutations(src, fn, negations)
    return (scopes, fn, muts[0]) if muts else None


def make_mutant(src: Source, plan, namer: Namer, rng: random.Random, targets: list[NodeId]):
    """The mutant of ``plan`` for ``targets`` (one function's ids), or None."""
    scopes, fn, mutation = plan
    name = namer.fresh(fn.name)
    text = copy_def(src, fn, name, mutation, rng)
    if text is None:
        return None
    after = scopes[-1].end_lineno if scopes else 0
    ids = {t.with_name(name): MUTANT_OF + t.with_name(t.name) for t in targets}
    return Canary(targets[0].classes, name, text, after, ids)


def make_blanks(namer: Namer, rng: random.Random, like: str, fails: int, passes: int):
    out = []
    for fail in [True] * fails + [False] * passes:
        name = namer.fresh(like)
        out.append(Canary((), name, blank(name, namer, rng, fail=fail), 0, passes=not fail))
    return out


def assemble(src: Source, canaries: list[Canary]) -> bytes:
    """The file with each canary after its line (the module end for 0), originals intact;
    deeper classes first where classes end on one line, so each def lands in its own."""
    at: dict[int, list[Canary]] = {}
    for c in canaries:
        at.setdefault(c.after, []).append(c)
    out = []
    for no, line in enumerate(src.lines, 1):
        out.append(line)
        if no in at:
            out.append(b"" if line.endswith((b"\n", b"\r")) else b"\n")
            out += [b"\n" + c.text for c in sorted(at[no], key=lambda c: -len(c.classes))]
    tail = at.get(0, [])
    if tail and src.data and not src.data.endswith((b"\n", b"\r")):
        out.append(b"\n")
    out += [b"\n\n" + c.text for c in tail]
    return src.bom + b"".join(out)


def placed(data: bytes, canaries: list[Canary]) -> bool:
    """Whether the planted file parses with every canary a def where its ids say."""
    src = read_source(data)
    return src is not None and all(find_def(src, c.classes, c.name) is not None for c in canaries)


def plant_file(src: Source, mutants: list[Canary], blanks: list[Canary], rng: random.Random):
    """(planted bytes, canaries) of one file: mutants dropped if they do not land where
    their ids say, nothing when even the blanks do not."""
    for canaries in ([*mutants, *blanks], blanks):
        if not canaries:
            continue
        tail = [c for c in canaries if not c.after]
        rng.shuffle(tail)  # mutants and blanks interleaved at the module end
        ordered = [c for c in canaries if c.after] + tail
        data = assemble(src, ordered)
        if placed(data, ordered):
            return data, ordered
    return None


# --- the plan over all targets --------------------------------------------------------------


def group_targets(files: dict[str, bytes], targets: list[str]) -> dict[tuple, list[NodeId]]:
    """(path, class chain, name) -> the target ids of that function, in order."""
    out: dict[tuple, list[NodeId]] = {}
    for t in dict.fromkeys(targets):
        node = parse_node_id(t)
        if node is not None and node.path in files:
            out.setdefault((node.path, node.classes, node.name), []).append(node)
    return out


def spread(groups: dict[tuple, list[NodeId]], rng: random.Random, budget: int):
    """Up to ``budget`` ids of ``groups``, one per function at a time, functions shuffled."""
    queue = list(groups)
    rng.shuffle(queue)
    left = {q: list(groups[q]) for q in queue}
    chosen: dict[tuple, list[NodeId]] = {}
    while budget > 0 and any(left.values()):
        for q in queue:
            if left[q] and budget > 0:
                chosen.setdefault(q, []).append(left[q].pop(0))
                budget -= 1
    return chosen


def plant(
    files: dict[str, bytes],
    targets: list[str],
    rng: random.Random,
    *,
    blanks_per_file: int = 1,
    passes_per_file: int = 1,
    max_mutants: int = 16,
    negations: bool = False,
) -> Planted:
    """Canaries in the files of ``targets`` (node ids of the F2P and hidden tests); see the
    module doc. ``files``: relpath -> the task's bytes. Up to ``max_mutants`` mutant ids,
    spread over the targets that have a safe mutation; per file ``blanks_per_file``
    must-fail and ``passes_per_file`` must-pass blanks. Deterministic for ``rng``'s state.

    ``negations`` also mutates by negating an assertion (``!=`` to ``==``, ``<`` to ``>=``,
    ``assert x`` to ``assert not x``, ``assertTrue`` to ``assertFalse``): sound when a test
    computes the same on a second run, but a test whose result depends on what ran before
    (a cache, a directory the first run filled) can pass its negation honestly. A fresh
    expected value (``== 5`` to ``== 5713``) is met by no such drift."""
    groups = group_targets(files, targets)
    sources = {p: s for p in sorted({g[0] for g in groups}) if (s := read_source(files[p]))}
    plans = {
        g: plan
        for g, ids in groups.items()
        if g[0] in sources and (plan := plan_mutant(sources[g[0]], ids[0], negations))
    }
    chosen = spread({g: groups[g] for g in plans}, rng, max_mutants)
    taken: set[str] = set()  # every name seen or made: canary names are unique over files
    out = Planted()
    for path, src in sources.items():
        namer = Namer(src.tree, taken, rng)
        mutants = [
            make_mutant(src, plans[g], namer, rng, ids) for g, ids in chosen.items() if g[0] == path
        ]
        like = next(ids[0].name for g, ids in groups.items() if g[0] == path)
        blanks = make_blanks(namer, rng, like, blanks_per_file, passes_per_file)
        done = plant_file(src, [m for m in mutants if m], blanks, rng)
        if done is not None:
            out.files[path] = done[0]
            for c in done[1]:
                record(out, path, c)
    return out


def record(out: Planted, path: str, c: Canary) -> None:
    if c.ids:
        out.must_fail.update(c.ids)
    elif c.passes:
        out.must_pass.append("::".join([path, *c.classes, c.name]))
    else:
        out.must_fail["::".join([path, *c.classes, c.name])] = "blank"


# --- reading a run ------------------------------------------------------------------------


def forged(planted: Planted, outcomes: dict[str, str]) -> list[str]:
    """The must-fail canaries whose passing proves a forgery: a blank that passed, a
    mutant that passed while its original passed too (alone, a passing mutant may be a
    wrong fix that happens to meet the changed assertion)."""
    out = []
    for node, why in planted.must_fail.items():
        if outcomes.get(node) not in PASSING:
            continue
        if not why.startswith(MUTANT_OF) or outcomes.get(why[len(MUTANT_OF) :]) in PASSING:
            out.append(node)
    return out


def broken(planted: Planted, outcomes: dict[str, str]) -> list[str]:
    """The must-pass canaries that did not pass: the run did not execute the file as
    planted, so its canaries prove nothing either way."""
    return [node for node in planted.must_pass if outcomes.get(node) != "passed"]
