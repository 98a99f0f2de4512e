"""Variant runs: each judged test once more, alone in a process, as itself or as a mutant.

The judge's main pytest run holds every test, canary and copy in one process with the
tree's code, which can therefore tell them apart (by name, by place, by comparing their
code) and forge only the tests that count. The variant run takes that away. For each
target test (the task's FAIL_TO_PASS and hidden tests) it makes variants of the test's
module: the module as the task has it, and mutants with one expected value made another
plausible value (an integer a few units off, a string with one character changed, a
parametrized case's expected argument, an ``expected = ...`` binding). Each variant runs
in a process of its own (codeloop.agent.variant_boot: forked from a runner that never
holds a variant's text, reading only its own and closing the file before any of the
tree's code runs), in a copy of the tree where no test module is on disk, so code in that
process sees exactly one version of one test and nothing to compare it with.

What holds by construction: code that makes a test pass without computing what the test
checks (a patched runner, neutered items, an equality that always holds, an oracle that
reads the expected value from the caller, the test's file or its arguments) cannot know
whether the variant in front of it is the test or a mutant, so it passes the mutants too:
``verdict_forged``. Code that behaves only under the main run (by the file, name or
environment of its caller) fails the test here: ``variant_mismatch``, and the test counts
as failed. Only computing the right values passes the test and fails its mutants.

What remains: code that knows a test's expected values already (a visible test's, read in
the workspace) can answer them, as a hard-coded answer can; variants run one after the
other in one tree, so a process can leave notes for the next ones and, having seen every
variant's value of a test, guess which one is the task's (about one chance in the number
of variants, before the first variant ran); a test with no value to mutate gets no mutant
(its variant run still takes away the main run's context).
"""

from __future__ import annotations

import ast
import json
import os
import posixpath
import random
import re
import secrets
import struct
import subprocess
from dataclasses import dataclass, field

from codeloop.agent.canaries import (
    NodeId,
    Source,
    find_def,
    identifiers,
    is_literal,
    is_loose,
    name_span,
    parse_node_id,
    read_source,
    surely_reached,
)
from codeloop.agent.envdirs import runner_file
from codeloop.agent.fsops import remove_path, write_bytes
from codeloop.agent.workspace import node_file
from codeloop.sandbox.base import CmdJob
from codeloop.sandbox.cmdjobs import image_env
from codeloop.sandbox.pool import child_python

# Outcomes a variant run reports; only "passed" passes.
OUTCOMES = ("passed", "failed", "error", "skipped", "missing", "timeout", "killed")
FLAGS = ("variant_mismatch",)
HEADER = struct.Struct(">I")  # length of a record's JSON header in the variants file
ARGS = ("-q", "--tb=no", "-p", "no:cacheprovider", "--rootdir=.", "-o",
        "console_output_style=classic")


@dataclass
class Variant:
    vid: str  # random: says nothing of the variant
    node: str  # the target test's node id
    run: str  # the node id it runs under (a parametrized case's id made meaningless)
    rel: str  # its file
    text: bytes  # the whole module as this variant has it
    original: bool


@dataclass
class VariantPlan:
    targets: list[str] = field(default_factory=list)
    variants: list[Variant] = field(default_factory=list)  # shuffled
    mutants: dict[str, int] = field(default_factory=dict)  # target -> mutants made

    def original(self, node: str) -> str:
        return next(v.vid for v in self.variants if v.node == node and v.original)

    def mutant_ids(self, node: str) -> list[str]:
        return [v.vid for v in self.variants if v.node == node and not v.original]


# --- another value, written as the test writes its own ----------------------------------

CLASSES = (b"abcdefghijklmnopqrstuvwxyz", b"ABCDEFGHIJKLMNOPQRSTUVWXYZ", b"0123456789")


def edited(token: bytes, rng: random.Random, tries: int = 24) -> bytes | None:
    """``token`` (a literal's source text) with one letter or digit changed to another of
    its kind: the same quotes, spacing and spelling, another value of the same type.
    True and False swap; None when no such edit gives another value."""
    old = _value(token)
    if isinstance(old, bool) and token in (b"True", b"False"):
        return b"False" if old else b"True"
    spots = [i for i, c in enumerate(token) if any(c in pool for pool in CLASSES)
             and not (i and token[i - 1 : i] == b"\\")]
    for _ in range(tries if spots else 0):
        i = rng.choice(spots)
        pool = next(p for p in CLASSES if token[i] in p)
        new = token[:i] + bytes([rng.choice(pool.replace(token[i : i + 1], b""))]) + token[i + 1 :]
        val = _value(new)
        if val is not _BAD and type(val) is type(old) and val != old:
            return new
    return None


_BAD = object()


def _value(token: bytes):
    try:
        return ast.literal_eval(token.decode("utf-8"))
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError, UnicodeDecodeError):
        return _BAD


# --- where a test's expected value is written --------------------------------------------


@dataclass
class Site:
    span: tuple[int, int]  # byte offsets of the literal whose value a mutant changes


Edit = tuple[int, int, bytes]  # replace data[start:end] with bytes


def _apply(data: bytes, edits: list[Edit]) -> bytes:
    for start, end, text in sorted(edits, reverse=True):
        data = data[:start] + text + data[end:]
    return data


def _compared(stmt: ast.stmt) -> list[ast.AST]:
    """The operands an equality assertion compares (assert a == b, self.assertEqual)."""
    if isinstance(stmt, ast.Assert) and not is_loose(stmt.test):
        t = stmt.test
        if isinstance(t, ast.Compare) and len(t.ops) == 1 and isinstance(t.ops[0], ast.Eq):
            return [t.left, t.comparators[0]]
    call = stmt.value if isinstance(stmt, ast.Expr) else None
    if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and not is_loose(call):
        if call.func.attr in ("assertEqual", "assertEquals") and len(call.args) >= 2:
            return list(call.args[:2])
    return []


# methods that keep two strings apart when one letter or digit of one of them changed
SAFE_METHODS = frozenset({"capitalize", "lower", "upper", "title", "swapcase", "strip",
                          "lstrip", "rstrip"})


def _uses(fn) -> dict[str, int]:
    """How often each name is read in fn (nested scopes included)."""
    out: dict[str, int] = {}
    for n in ast.walk(fn):
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load):
            out[n.id] = out.get(n.id, 0) + 1
    return out


def _of_name(node: ast.AST, name: str) -> bool:
    """``node`` is ``name`` itself or ``name`` through string methods that keep values
    apart (``plural.capitalize()``)."""
    while isinstance(node, ast.Call) and not node.args and not node.keywords:
        func = node.func
        if not (isinstance(func, ast.Attribute) and func.attr in SAFE_METHODS):
            return False
        node = func.value
    return isinstance(node, ast.Name) and node.id == name


def _expected_names(fn, body: list[ast.stmt]) -> set[str]:
    """Names read only as the expected side of equality assertions: changing the value a
    name holds changes what is expected there and nothing the tree's code is given."""
    uses, seen = _uses(fn), {}
    for stmt in body:
        ops = _compared(stmt)
        for a, b in ((ops[0], ops[1]), (ops[1], ops[0])) if ops else ():
            for n in ast.walk(a):
                if isinstance(n, ast.Name) and _of_name(a, n.id) and not any(
                        isinstance(m, ast.Name) and m.id == n.id for m in ast.walk(b)):
                    seen[n.id] = seen.get(n.id, 0) + 1
    return {name for name, count in seen.items() if count == uses.get(name)}


def _literal_sites(src: Source, fn) -> list[Site]:
    """Literals an assertion compares with, directly or through a name bound to one and
    read only there (a value that also feeds the call would change what is checked)."""
    body = surely_reached(fn)
    expected = _expected_names(fn, body)
    out = []
    for stmt in body:
        if (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1
                and isinstance(stmt.targets[0], ast.Name) and is_literal(stmt.value)
                and stmt.targets[0].id in expected):
            out.append(Site(src.span(stmt.value)))
        ops = _compared(stmt)
        for a, b in ((ops[0], ops[1]), (ops[1], ops[0])) if ops else ():
            if is_literal(b) and not is_literal(a):
                out.append(Site(src.span(b)))
    return out


def _module_value(src: Source, name: str) -> ast.AST | None:
    """What the module's last top-level ``name = ...`` binds ``name`` to."""
    found = None
    for stmt in src.tree.body:
        if (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1
                and isinstance(stmt.targets[0], ast.Name) and stmt.targets[0].id == name):
            found = stmt.value
    return found


def _parametrize(src: Source, fn):
    """(argnames, cases, ids node, the mark) of fn's one ``parametrize`` mark; else None.
    Cases written inline or as a module-level list or tuple the mark names."""
    marks = [d for d in fn.decorator_list if isinstance(d, ast.Call)
             and isinstance(d.func, ast.Attribute) and d.func.attr == "parametrize"]
    if len(marks) != 1 or len(marks[0].args) < 2:
        return None
    names, cases = marks[0].args[:2]
    if isinstance(cases, ast.Name):
        cases = _module_value(src, cases.id)
    if not (is_literal(names) and isinstance(cases, ast.List | ast.Tuple)):
        return None
    names = ast.literal_eval(names)
    names = [n.strip() for n in names.split(",")] if isinstance(names, str) else list(names)
    ids = next((k.value for k in marks[0].keywords if k.arg == "ids"), None)
    return names, cases.elts, ids, marks[0]


def _is_param_call(node: ast.AST) -> bool:
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute | ast.Name)
            and getattr(node.func, "attr", getattr(node.func, "id", "")) == "param")


def _case_values(case: ast.AST, n: int) -> list[ast.AST] | None:
    if _is_param_call(case):
        return list(case.args) if len(case.args) == n else None
    if n == 1:
        return [case]
    if isinstance(case, ast.Tuple | ast.List) and len(case.elts) == n:
        return list(case.elts)
    return None


def case_ids(names: list[str], cases: list[ast.AST], ids_node) -> list[str] | None:
    """pytest's ids for literal cases (its own IdMaker, no config); None when a case's
    values or ids are not literals."""
    from _pytest.mark.structures import ParameterSet
    from _pytest.python import IdMaker

    sets = []
    for case in cases:
        vals = _case_values(case, len(names))
        if vals is None or not all(is_literal(v) for v in vals):
            return None
        own = None
        if _is_param_call(case):
            kw = {k.arg: k.value for k in case.keywords}
            if "id" in kw:
                if not is_literal(kw["id"]):
                    return None
                own = ast.literal_eval(kw["id"])
        sets.append(ParameterSet(values=tuple(ast.literal_eval(v) for v in vals), marks=(),
                                 id=own))
    ids = None
    if ids_node is not None:
        if not is_literal(ids_node):
            return None
        ids = list(ast.literal_eval(ids_node))
    try:
        return [str(i) for i in IdMaker(names, sets, None, ids, None, nodeid=None)
                .make_unique_parameterset_ids()]
    except Exception:  # noqa: BLE001 - ids we cannot make as pytest would: no mutant here
        return None


@dataclass
class Case:
    """A parametrized target's case: its expected arguments and the edits that give it an
    id of no meaning (pytest's own ids are made from the values, the expected one too)."""

    sites: list[Site]
    renamed: list[Edit]
    suffix: str  # the case's part of the node id its variants run under


def _target_case(src: Source, fn, node: NodeId, rng: random.Random) -> Case | None:
    found = _parametrize(src, fn)
    if found is None or not node.suffix:
        return None
    names, cases, ids_node, mark = found
    ids = case_ids(names, cases, ids_node)
    if ids is None or node.suffix[1:-1] not in ids:
        return None
    at = ids.index(node.suffix[1:-1])
    case = cases[at]
    token = f"case{rng.getrandbits(40):010x}"
    own_id = {k.arg: k.value for k in case.keywords}.get("id") if _is_param_call(case) else None
    if own_id is not None:
        renamed = [(*src.span(own_id), repr(token).encode())]
    elif ids_node is not None:
        if not isinstance(ids_node, ast.List | ast.Tuple) or at >= len(ids_node.elts):
            return None
        renamed = [(*src.span(ids_node.elts[at]), repr(token).encode())]
    else:
        tokens = [f"case{rng.getrandbits(40):010x}" for _ in ids]
        tokens[at] = token
        renamed = [_ids_insert(src, mark, tokens)]
    vals = _case_values(case, len(names))
    expected = _expected_names(fn, surely_reached(fn))
    sites = [Site(src.span(vals[i])) for i, name in enumerate(names)
             if name in expected and is_literal(vals[i])]
    return Case(sites, renamed, f"[{token}]")


def _ids_insert(src: Source, mark: ast.Call, ids: list[str]) -> Edit:
    """The edit that makes ``mark`` name its cases ``ids``."""
    end = src.span(mark)[1] - 1  # its closing bracket
    before = src.data[:end].rstrip()
    sep = b" " if before.endswith(b",") else b", "
    return end, end, sep + b"ids=" + repr(list(ids)).encode()


# Every equality a variant's test asserts goes through this: equal as asserted, and not
# equal to a value one step from either side (in an order drawn each time), which no
# honest value is and an equality that holds whatever it is given is. Objects of classes
# the test module defines itself (a test's own always-equal helper) are not probed.
EQ = "_codeloop_eq"
HELPER = f"""


def {EQ}(a, b):
    if not a == b:
        return False
    probes = [(a, b), (b, a)]
    if __import__("os").urandom(1)[0] & 1:
        probes.reverse()
    own = {{id(v) for v in list(globals().values())
           if isinstance(v, type) and v.__module__ == __name__}}
    for x, y in probes:
        if id(type(x)) in own:  # the test's own class: its equality is the test's to define
            continue
        other = {EQ}_step(y)
        try:
            if x == other:
                return False
        except Exception:
            pass
    return True


def {EQ}_step(v):
    t = type(v)
    if t is bool:
        return not v
    if t in (int, complex):
        return v + 1
    if t is float and v == v and abs(v) != float("inf"):
        return v + max(abs(v) * 1e-3, 1e-3)
    if t in (str, bytes):
        if not v:
            return v + v[:0].__class__("x" if t is str else b"x")
        last = v[-1] if t is str else chr(v[-1])
        new = chr(ord(last) ^ 1) if last.isalnum() else "x"
        return v[:-1] + (new if t is str else new.encode("latin-1"))
    if t in (list, tuple):
        return v + t([object()])
    if t is dict:
        return {{**v, object(): 0}}
    if t in (set, frozenset):
        return v | t([object()])
    return object()
"""


def _eq_checks(src: Source, fn, mut: Edit | None) -> tuple[list[Edit], bool]:
    """Edits routing the test's equality assertions through ``EQ`` (a mutation inside one
    is carried along); whether the mutation was carried."""
    def seg(node) -> bytes:
        a, b = src.span(node)
        text = src.data[a:b]
        if mut is not None and a <= mut[0] and mut[1] <= b:
            text = text[: mut[0] - a] + mut[2] + text[mut[1] - a :]
        return text

    edits, carried = [], False
    for node in ast.walk(fn):
        span = None
        if isinstance(node, ast.Assert) and isinstance(node.test, ast.Compare):
            t = node.test
            if len(t.ops) == 1 and isinstance(t.ops[0], ast.Eq) and not is_loose(t):
                span = src.span(t)
                text = b"%s((%s), (%s))" % (EQ.encode(), seg(t.left), seg(t.comparators[0]))
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
            call = node.value
            func = call.func
            if (isinstance(func, ast.Attribute) and func.attr in ("assertEqual", "assertEquals")
                    and len(call.args) >= 2 and not is_loose(call)):
                span = src.span(call)
                rest = [seg(x) for x in call.args[2:]] + [
                    (b"%s=%s" % (k.arg.encode(), seg(k.value)) if k.arg else b"**" + seg(k.value))
                    for k in call.keywords]
                head = seg(func.value) + b".assertTrue("
                text = head + b", ".join([b"%s((%s), (%s))" % (EQ.encode(), seg(call.args[0]),
                                                               seg(call.args[1])), *rest]) + b")"
        if span is not None:
            edits.append((*span, text))
            carried |= mut is not None and span[0] <= mut[0] and mut[1] <= span[1]
    return edits, carried


WORDS = ("basic", "cases", "checks", "core", "edge", "extra", "mixed", "plain", "usage", "values")
CLASS = re.compile(rb"class\s+")


def _fresh(like: str, taken: set[str], rng: random.Random, prefix: str) -> str | None:
    """A name of the same kind as ``like`` (its ``prefix``), spelled nowhere in the module."""
    if not like.startswith(prefix):
        return None
    while True:
        name = f"{prefix}{rng.choice(WORDS)}_{rng.getrandbits(32):08x}"
        if name not in taken:
            return name


def _renamed(src: Source, found, nid: NodeId, rng: random.Random) -> tuple[list[Edit], NodeId]:
    """Edits that give the test (and its class, where nothing else names it) and its file
    fresh names, and the node id they make: code that answers only where it finds a test
    it knows by name answers nothing here."""
    scopes, fn = found
    taken = identifiers(src.tree)
    edits, classes, name = [], list(nid.classes), nid.name
    new = _fresh(fn.name, taken, rng, "test_")
    where = name_span(src, fn)
    if new and where:
        edits.append((*where, new.encode()))
        name = new
    if len(scopes) == 1 and _only_defined(src, scopes[0].name):
        at = src.offset(scopes[0].lineno, scopes[0].col_offset)
        m = CLASS.match(src.data, at)
        new = _fresh(scopes[0].name, taken, rng, "Test")
        if m and new and src.data.startswith(scopes[0].name.encode(), m.end()):
            edits.append((m.end(), m.end() + len(scopes[0].name.encode()), new.encode()))
            classes = [new]
    path = nid.path
    base = posixpath.basename(path)
    stem = base[:-3]
    if base.startswith("test_") or base.endswith("_test.py"):
        word = f"{rng.choice(WORDS)}_{rng.getrandbits(32):08x}"
        fresh = f"test_{word}.py" if base.startswith("test_") else f"{word}_test.py"
        if fresh[:-3] != stem:
            path = posixpath.join(posixpath.dirname(path), fresh)
    return edits, NodeId(path, tuple(classes), name, nid.suffix)


def _only_defined(src: Source, name: str) -> bool:
    """No code of the module reads ``name`` (renaming its definition breaks nothing)."""
    return not any(isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load)
                   for n in ast.walk(src.tree))


def variant_texts(data: bytes, node: str, count: int, rng: random.Random
                  ) -> tuple[str, bytes, list[bytes]]:
    """(the node id its variants run under, the test ``node``'s module as its own variant
    runs it, up to ``count`` mutants; see the module doc). Every variant has the test, its
    file and (where it can) its class under fresh names and a parametrized case under an
    id of no meaning; a test we cannot read runs as the task has it."""
    src = read_source(data)
    nid = parse_node_id(node)
    found = find_def(src, nid.classes, nid.name) if src and nid else None
    if found is None:
        return node, data, []
    sites = _literal_sites(src, found[1])
    renamed, run = _renamed(src, found, nid, rng)
    case = _target_case(src, found[1], nid, rng)
    if case is not None and _compiles(src.bom + _apply(src.data, renamed + case.renamed), node):
        renamed, sites = renamed + case.renamed, sites + case.sites
        run = NodeId(run.path, run.classes, run.name, case.suffix)
    checks, _ = _eq_checks(src, found[1], None)
    own = src.bom + _apply(src.data, renamed + checks) + HELPER.encode()
    if not _compiles(own, node):
        return node, data, []
    out: list[bytes] = []
    for _ in range(4 * count):
        if not sites or len(out) >= count:
            break
        site = rng.choice(sites)
        a, b = site.span
        new = edited(src.data[a:b], rng)
        if new is None:
            sites.remove(site)
            continue
        checks, carried = _eq_checks(src, found[1], (a, b, new))
        edits = [*renamed, *checks] + ([] if carried else [(a, b, new)])
        text = src.bom + _apply(src.data, edits) + HELPER.encode()
        if text not in out and text != own and _compiles(text, node):
            out.append(text)
    return run.with_name(run.name), own, out


def _compiles(text: bytes, node: str) -> bool:
    try:
        compile(text, node_file(node), "exec", dont_inherit=True)
    except (SyntaxError, ValueError):
        return False
    return True


def plan_variants(tests: dict[str, bytes], groups: list[list[str]], rng: random.Random, *,
                  mutants: int = 2, max_each: int = 8) -> VariantPlan:
    """Variants of target tests whose module is a plain file of the tree: of each group
    (the F2P tests, the hidden tests) a random sample of ``max_each``. Sound for a sample:
    a verdict needs every test of a group to pass, so what passes them without a fix has
    to pass the sampled ones too, and cannot know which those are."""
    plan = VariantPlan()
    nodes = [n for g in groups for n in (g if len(g) <= max_each else rng.sample(g, max_each))]
    for node in nodes:
        rel = node_file(node)
        data = tests.get(rel)
        if data is None or data.startswith(b"L:") or parse_node_id(node) is None:
            continue
        plan.targets.append(node)
        run, own, made = variant_texts(data, node, mutants, rng)
        at = node_file(run)
        plan.variants.append(Variant(secrets.token_hex(8), node, run, at, own, True))
        plan.mutants[node] = len(made)
        plan.variants += [Variant(secrets.token_hex(8), node, run, at, t, False) for t in made]
    rng.shuffle(plan.variants)
    return plan


# --- the run's files and what it reports -------------------------------------------------


def write_variants(plan: VariantPlan, path: str) -> None:
    """The variants file: per variant a length-prefixed JSON header, then the module."""
    with open(path, "wb") as fh:
        for v in plan.variants:
            head = json.dumps({"id": v.vid, "node": v.run, "rel": v.rel,
                               "len": len(v.text)}).encode()
            fh.write(HEADER.pack(len(head)) + head + v.text)


def variant_tree(src: str, dest: str, tests: dict[str, bytes], own: set[str],
                 plan: VariantPlan) -> None:
    """``src`` (the sealed tree, before any canary) copied to ``dest`` with no test module
    on disk: conftests, helpers and config stay; each variant's file (the fresh name its
    test runs under) is an empty stand-in, its module served from memory."""
    # cp, not copytree: a tree the patch made thousands of levels deep is copied too
    done = subprocess.run(["cp", "-a", "--", src, dest], capture_output=True, text=True)
    if done.returncode != 0:
        raise OSError(f"copying the tree for the variant run failed: {done.stderr[-300:]}")
    for rel in tests:
        name = posixpath.basename(rel)
        module = name.endswith(".py") and (name.startswith("test_") or name.endswith("_test.py"))
        if module or rel in own:
            remove_path(dest, rel)
    for rel in {v.rel for v in plan.variants}:
        write_bytes(dest, rel, b"")


def variant_job(plan: VariantPlan, ws: str, ws_root, env_dirs: list[str], changed: list[str],
                *, timeout_s: float, per_test_s: float, memory_mb: int | None
                ) -> tuple[str, CmdJob]:
    """(the run's nonce, the command) for the variants of ``plan`` in ``ws``/repo."""
    nonce = secrets.token_hex(16)
    spec, blob = os.path.join(ws, "variants.json"), os.path.join(ws, "variants.bin")
    write_variants(plan, blob)
    with open(spec, "w", encoding="utf-8") as fh:
        json.dump({"nonce": nonce, "paths": env_dirs, "variants": ws_root.inside(blob)[0],
                   "count": len(plan.variants), "args": list(ARGS), "timeout": per_test_s,
                   "changed": changed}, fh)
    runner = ws_root.env_inside(runner_file(ws_root.envs_root))
    job = CmdJob(argv=[child_python(), "-I", "-B", runner, ws_root.inside(spec)[0]],
                 cwd_host=os.path.join(ws, "repo"), timeout_s=timeout_s, memory_mb=memory_mb,
                 output_cap=8 << 20, result_cap=1 << 20, image_env=image_env(env_dirs))
    return nonce, job


def read_variant_run(text: str, nonce: str, plan: VariantPlan) -> tuple[dict[str, str], list[str]]:
    """(variant id -> outcome, what did not add up). Records count as the channel's do:
    this run's nonce, one pid, a contiguous sequence, a finish counting them; a run that
    does not add up gives no variant an outcome."""
    outcomes, problems, seq, pid, finished = {}, [], 0, None, False
    for line in text.splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            rec = None
        if not isinstance(rec, dict) or rec.get("n") != nonce or rec.get("seq") != seq:
            problems.append(f"variant run record out of place: {line[:80]!r}")
            continue
        pid = rec.get("pid") if seq == 0 else pid
        if rec.get("pid") != pid or finished:
            problems.append(f"variant run record {seq} from another pid or after finish")
        seq += 1
        if rec.get("k") == "var" and rec.get("outcome") in OUTCOMES:
            outcomes.setdefault(str(rec.get("id")), str(rec["outcome"]))
        elif rec.get("k") == "finish":
            finished = rec.get("records") == seq - 1
    if not finished:
        problems.append("the variant run did not finish with its records counted")
    if problems:
        return {}, problems
    return outcomes, []


def cross_check(plan: VariantPlan, var: dict[str, str], outcomes: dict[str, str]
                ) -> tuple[dict[str, str], set[str], list[str]]:
    """The main run's outcomes with the variant runs' verdict: (outcomes, flags, problems).
    A target passes only if its variant passed too; a mutant passing next to a passing
    variant is a forged verdict."""
    out, flags, problems = dict(outcomes), set(), []
    for node in plan.targets:
        mine = var.get(plan.original(node), "missing")
        if outcomes.get(node) == "passed" and mine != "passed":
            out[node] = "failed"
            flags.add("variant_mismatch")
            problems.append(f"{node} passed in the main run, {mine} alone")
        forged = [m for m in plan.mutant_ids(node) if var.get(m) == "passed"]
        if mine == "passed" and forged:
            flags.add("verdict_forged")
            problems.append(f"{node}: {len(forged)} of its mutants passed alone")
    return out, flags, problems
