"""Seeded procedural generator of small Python repositories with one planted bug per task.

A repository is a package of 2-6 modules of a few short functions. Functions form call
chains (a leaf, then callers up to ``max_depth``) that cross modules (a caller may import
from a lower module, never a higher one, so imports never cycle); the top of each chain
is tested in ``tests/test_<module>.py`` (visible) and ``tests/test_hidden.py`` (hidden:
the file is absent from the agent's workspace), and every function, leaves included, in
``tests/test_differential.py`` (hidden too; codeloop.data.repos.differential). A task
plants one AST mutation (codeloop.data.repos.mutate) in a function of a chain at
``distance`` calls below the tested top: the difficulty knob is files, call depth and that
distance.

Sized for the embedded tiny model (1024 positions): modules of ~5-15 short lines, so a
whole expert episode (statement, a test run, one read, one edit, the re-run, submit)
fits in the model's context. Expected values and the failing set come from executing the
generated code in-process (our own code, loop-free but for finite ``for`` loops); the
clean stage's executability filter re-checks every task with real pytest in the sandbox.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass, field

from codeloop.data.repos.differential import (
    DIFF_FILE,
    cap_ranges,
    case_name,
    reference_cases,
    tests_source,
)
from codeloop.data.repos.diffs import file_diff
from codeloop.data.repos.mutate import OPERATORS, Mutation, apply_mutation, find_mutations
from codeloop.data.repos.store import files_hash
from codeloop.schema import Task

# v2: the statement names the file; one-word packages. v3: differential hidden tests
GENERATOR_VERSION = "synth-repo-v3"
LICENSE = "Apache-2.0"
HIDDEN_FILE = "tests/test_hidden.py"


@dataclass(frozen=True)
class Tpl:
    """A function template: signature in/out, the callee's signature for callers."""

    name: str
    sig: str  # "int" | "list" | "int2" (two ints)
    out: str  # "int" | "list"
    callee: str  # "" for a leaf, else "<sig>><out>" of the function it calls
    body: str  # lines; {g} callee, {k} {j} small constants


LEAVES = (
    Tpl("affine", "int", "int", "", "return x * {k} + {j}"),
    Tpl("floor", "int", "int", "", "if x < {k}:\n    return {k}\nreturn x"),
    Tpl("weigh", "int2", "int", "", "return a * {k} - b"),
    Tpl("sum_over", "list", "int", "", "total = 0\nfor v in xs:\n    if v > {k}:\n        total += v\nreturn total"),
    Tpl("tail_sum", "list", "int", "", "return sum(xs[{k}:])"),
    Tpl("upto", "int", "list", "", "return list(range({k}, x))"),
    Tpl("bump", "list", "list", "", "return [v + {k} for v in xs if v != {j}]"),
    Tpl("head", "list", "list", "", "return xs[:{k}]"),
)
CALLERS = (
    Tpl("then_add", "int", "int", "int>int", "y = {g}(x)\nreturn y + {k}"),
    Tpl("map", "list", "list", "int>int", "return [{g}(v) for v in xs]"),
    Tpl("times", "list", "int", "list>int", "return {g}(xs) * {k}"),
    Tpl("with_k", "int", "int", "int2>int", "return {g}(x, {k})"),
    Tpl("count_of", "list", "int", "list>list", "ys = {g}(xs)\nreturn len(ys) + sum(ys)"),
    Tpl("sum_of", "int", "int", "int>list", "return sum({g}(x))"),
    Tpl("acc", "list", "int", "int>int", "total = 0\nfor v in xs:\n    total += {g}(v)\nreturn total"),
)
PARAMS = {"int": "x", "list": "xs", "int2": "a, b"}
VERBS = ("scale", "shift", "clip", "count", "sum", "pick", "trim", "mix", "step", "fold",
         "rank", "grow", "merge", "split", "score", "check")
NOUNS = ("price", "item", "point", "level", "stock", "total", "value", "size", "rate",
         "tax", "fee", "load", "mark", "step", "cell", "row")
# never a standard-library name: the stdlib module shadowed a package called signal, whose
# tests then failed to import (6 of 60 nightly tasks dropped as collect_error); a test checks
PACKAGES = ("shop", "grades", "inventory", "ledger", "meters", "tiles", "garden", "orbit",
            "parcel", "quarry", "rivers", "beacon", "timber", "voyage", "widget", "yarn")
MODULES = ("core", "util", "calc", "rules", "stats", "table", "parts", "model")
# Bugs whose fix can be read off the code: the buggy line breaks one of the few templates,
# so the repair is the template's line. The others (`constant`, `off_by_one`,
# `wrong_return`) must be worked out from the statement's expected and actual values:
# arithmetic the embedded 4-layer model cannot do (bench/agent_curve.py --operators).
REPAIRABLE = ("arith", "compare", "condition", "swap_args", "drop_stmt")


@dataclass
class Fn:
    name: str
    module: int  # index into the repo's module list
    tpl: Tpl
    callee: Fn | None
    body: str


@dataclass
class Repo:
    """One generated repository: its files and, per chain, the functions and tests."""

    package: str
    modules: list[str]
    fns: list[Fn]
    chains: list[list[Fn]]  # leaf first, tested top last
    tests: list[tuple[str, str, tuple, object]] = field(default_factory=list)
    # (node id, function, args, expected)
    diff_tests: list[tuple[str, str, tuple, object]] = field(default_factory=list)
    # the same, of tests/test_differential.py
    files: dict[str, str] = field(default_factory=dict)

    def module_path(self, i: int) -> str:
        return f"{self.package}/{self.modules[i]}.py"


def _callers_for(sig: str, out: str) -> list[Tpl]:
    return [t for t in CALLERS if t.callee == f"{sig}>{out}"]


def _body(tpl: Tpl, rng: random.Random, callee: str) -> str:
    k, j = rng.randint(1, 3), rng.randint(0, 4)
    return tpl.body.format(g=callee, k=k, j=j)


def _build_chains(rng: random.Random, n_modules: int, max_depth: int) -> tuple[list[Fn], list]:
    names = rng.sample([f"{v}_{n}" for v in VERBS for n in NOUNS], 24)
    fns: list[Fn] = []
    chains: list[list[Fn]] = []
    while len(chains) < 2 or {f.module for f in fns} != set(range(n_modules)):
        if len(chains) >= 6 or not names:
            break
        empty = sorted(set(range(n_modules)) - {f.module for f in fns})
        mod = empty[0] if empty else rng.randrange(n_modules)
        tpl = rng.choice(LEAVES)
        fn = Fn(names.pop(), mod, tpl, None, _body(tpl, rng, ""))
        chain = [fn]
        for _ in range(rng.randint(1, max_depth) - 1):
            if not names:
                break
            tpl = rng.choice(_callers_for(fn.tpl.sig, fn.tpl.out))
            if fn.module < n_modules - 1 and rng.random() < 0.7:  # cross into a higher module
                mod = rng.randint(fn.module + 1, n_modules - 1)
            fn = Fn(names.pop(), mod, tpl, fn, _body(tpl, rng, fn.name))
            chain.append(fn)
        fns += chain
        chains.append(chain)
    return fns, chains


def _module_source(repo: Repo, i: int) -> str:
    mine = [f for f in repo.fns if f.module == i]
    imports: dict[int, list[str]] = {}
    for f in mine:
        if f.callee is not None and f.callee.module != i:
            imports.setdefault(f.callee.module, []).append(f.callee.name)
    lines = [f"from .{repo.modules[m]} import {', '.join(sorted(set(n)))}" for m, n in sorted(imports.items())]
    for f in mine:
        lines += ["", "", f"def {f.name}({PARAMS[f.tpl.sig]}):"]
        lines += ["    " + x for x in f.body.splitlines()]
    return "\n".join(lines).lstrip("\n") + "\n"


def _namespace(repo: Repo, sources: dict[str, str]) -> dict:
    """All modules executed into one namespace (names are unique across the package),
    lower modules first, relative imports dropped."""
    ns: dict = {}
    for i in range(len(repo.modules)):
        src = sources[repo.module_path(i)]
        code = "\n".join(x for x in src.splitlines() if not x.startswith("from ."))
        exec(compile(code, repo.module_path(i), "exec"), ns)  # noqa: S102 - our generated code
    return ns


def _args(sig: str, rng: random.Random) -> tuple:
    if sig == "list":
        return ([rng.randint(0, 9) for _ in range(rng.randint(3, 5))],)
    if sig == "int2":
        return (rng.randint(0, 9), rng.randint(0, 9))
    return (rng.randint(2, 9),)


def call(ns: dict, name: str, args: tuple) -> tuple[bool, object]:
    """(raised, value or 'TypeName: message') of ``name(*args)`` in a namespace."""
    try:
        return False, ns[name](*args)
    except Exception as exc:  # a planted bug may raise anything; that is its symptom
        return True, f"{type(exc).__name__}: {exc}"


def _tests(repo: Repo, rng: random.Random, ns: dict) -> None:
    by_file: dict[str, list[str]] = {}
    imports: dict[str, set[tuple[str, str]]] = {}
    for chain in repo.chains:
        top = chain[-1]
        mod = repo.modules[top.module]
        seen: set = set()
        for k in range(4):
            args = _args(top.tpl.sig, rng)
            if repr(args) in seen:
                continue
            seen.add(repr(args))
            path = HIDDEN_FILE if k >= 2 else f"tests/test_{mod}.py"
            name = f"test_{top.name}_{k + 1}"
            raised, value = call(ns, top.name, args)
            if raised:
                raise AssertionError(
                    f"generated {top.name}{args} raises on the pristine tree: {value}"
                )
            by_file.setdefault(path, []).append(
                f"def {name}():\n    assert {top.name}({', '.join(map(repr, args))}) == {value!r}\n"
            )
            imports.setdefault(path, set()).add((mod, top.name))
            repo.tests.append((f"{path}::{name}", top.name, args, value))
    for path, bodies in by_file.items():
        head = [f"from {repo.package}.{m} import {n}" for m, n in sorted(imports[path])]
        repo.files[path] = "\n".join(head) + "\n\n\n" + "\n\n".join(bodies)


def _differential(repo: Repo, seed: str) -> None:
    """Each function's differential tests (repo.diff_tests and their file), expected
    values from the pristine tree; inputs drawn from a generator of their own, so the
    rest of the repository is v2's."""
    rng = random.Random(f"{seed}:differential")
    ns = cap_ranges(_namespace(repo, repo.files))
    cases = []
    for fn in repo.fns:
        seen = [_args(fn.tpl.sig, rng) for _ in range(2)]
        found = reference_cases(ns, fn.name, seen, rng)
        if not found:  # the templates are total on _args' draws, so this is our bug
            raise AssertionError(f"generated {fn.name} has no input it does not raise on")
        for k, (args, value) in enumerate(found):
            test = case_name(fn.name, k)
            cases.append((test, repo.modules[fn.module], fn.name, args, value))
            repo.diff_tests.append((f"{DIFF_FILE}::{test}", fn.name, args, value))
    repo.files[DIFF_FILE] = tests_source(repo.package, cases)


def generate_repo(repo_seed: str, n_modules: int, max_depth: int) -> Repo:
    """One pristine repository from a seed string (deterministic)."""
    rng = random.Random(repo_seed)
    # One word, no numeric suffix: the SFT policy never copied `orbit_21` from the statement
    # into a path (it wrote a training repo's `tiles_22`); a one-token name is a shorter copy.
    # The suffix is still drawn so the rest of the repository is v1's.
    package, _ = rng.choice(PACKAGES), rng.randint(10, 99)
    modules = sorted(rng.sample(MODULES, n_modules), key=MODULES.index)
    fns, chains = _build_chains(rng, n_modules, max_depth)
    repo = Repo(package, modules, fns, chains)
    for i in range(n_modules):
        repo.files[repo.module_path(i)] = _module_source(repo, i)
    repo.files[f"{package}/__init__.py"] = ""
    _tests(repo, rng, _namespace(repo, repo.files))
    _differential(repo, repo_seed)
    tops = ", ".join(f"`{c[-1].name}`" for c in chains)
    repo.files["README.md"] = (
        f"# {package}\n\nSmall helpers in {len(modules)} modules ({', '.join(modules)}); "
        f"public functions: {tops}.\nRun the tests with `python -m pytest`.\n"
    )
    return repo


@dataclass
class Planted:
    """A mutation that some visible test catches, with its failing sets."""

    chain: list[Fn]
    fn: Fn
    distance: int
    mutation: Mutation
    buggy: str  # the mutated module's source
    failing: list[tuple[str, str, tuple, object, object]]  # (node, fn, args, expected, got)
    diff_failing: list[str] = field(default_factory=list)  # differential node ids


def _failing_differential(repo: Repo, sources: dict[str, str]) -> list[str]:
    """Differential tests the tree of ``sources`` fails, run as pytest will run them:
    with the real range(), whose bounds the inputs keep small (differential.capped_range)."""
    ns = _namespace(repo, sources)
    out = []
    for node, name, args, expected in repo.diff_tests:
        raised, got = call(ns, name, args)
        if raised or got != expected:
            out.append(node)
    return out


def plant_bugs(repo: Repo, max_distance: int, operators=None) -> list[Planted]:
    """Every mutation within ``max_distance`` calls of a tested top that a visible test
    catches, of the given mutation ``operators`` (default: all of mutate.OPERATORS), with
    the chain tests and the differential tests it fails."""
    out = []
    seen_code: set[str] = set()
    for chain in repo.chains:
        for distance, fn in enumerate(reversed(chain)):
            if distance > max_distance:
                break
            path = repo.module_path(fn.module)
            src = repo.files[path]
            for m in find_mutations(src, {fn.name}):
                if operators is not None and m.operator not in operators:
                    continue
                buggy = apply_mutation(src, m)
                if buggy in seen_code:
                    continue  # two operators that write the same code are one bug
                seen_code.add(buggy)
                ns = _namespace(repo, {**repo.files, path: buggy})
                failing = []
                for node, name, args, expected in repo.tests:
                    raised, got = call(ns, name, args)
                    if raised or got != expected:
                        failing.append(
                            (node, name, args, expected, ("raises", got) if raised else got)
                        )
                if any(not f[0].startswith(HIDDEN_FILE) for f in failing):
                    diff = _failing_differential(repo, {**repo.files, path: buggy})
                    out.append(Planted(chain, fn, distance, m, buggy, failing, diff))
    return out


def problem_statement(repo: Repo, p: Planted) -> str:
    """Which public behaviour broke, a reproducer, expected vs actual; never the cause."""
    node, name, args, expected, got = next(f for f in p.failing if not f[0].startswith(HIDDEN_FILE))
    mod = repo.modules[p.chain[-1].module]
    call_txt = f"{name}({', '.join(map(repr, args))})"
    if isinstance(got, tuple):
        head, result = f"`{name}` in `{repo.package}.{mod}` raises an error.", got[1]
    else:
        head, result = f"`{name}` in `{repo.package}.{mod}` returns a wrong result.", repr(got)
    # The file of the public function (the symptom, not the cause) in the very spelling a
    # read_file call takes: the embedded model, asked to turn `pkg.mod` into `pkg/mod.py`,
    # wrote a training repo's package name instead in 27 of 60 held-out episodes.
    return (
        f"{head}\n\n>>> from {repo.package}.{mod} import {name}\n>>> {call_txt}\n{result}\n\n"
        f"Expected {expected!r}. `{name}` is defined in {repo.module_path(p.chain[-1].module)}."
    )


def _task(repo: Repo, sha: str, p: Planted, task_id: str, provenance: dict) -> Task:
    path = repo.module_path(p.fn.module)
    pristine = repo.files[path]
    failing = {f[0] for f in p.failing} | set(p.diff_failing)
    visible = sorted(t[0] for t in repo.tests if not t[0].startswith(HIDDEN_FILE))
    # the differential tests of the buggy function and of its callers up the chain: the
    # only ones it can fail (every other function's never call it)
    above = {f.name for f in p.chain[p.chain.index(p.fn) :]}
    hidden = sorted(
        [t[0] for t in repo.tests if t[0].startswith(HIDDEN_FILE)]
        + [t[0] for t in repo.diff_tests if t[1] in above]
    )
    cross = p.fn.module != p.chain[-1].module
    return Task(
        task_id=task_id,
        source="synthetic_repo",
        prompt=problem_statement(repo, p),
        kind="repo",
        repo=repo.package,
        snapshot=sha,
        bug_patch=file_diff(path, pristine, p.buggy),
        patch=file_diff(path, p.buggy, pristine),
        fail_to_pass=[n for n in visible if n in failing],
        pass_to_pass=[n for n in visible if n not in failing],
        visible_tests=visible,
        hidden_tests=hidden,
        difficulty=p.distance + int(cross),
        metadata={
            "license": LICENSE,
            "provenance": provenance,
            "hidden_fail_to_pass": [n for n in hidden if n in failing],
            "mutation": {"operator": p.mutation.operator, "path": path,
                         "function": p.fn.name, "site": f"{path}:{p.mutation.site}"},
            "symptom_path": repo.module_path(p.chain[-1].module),
            "distance": p.distance,
            "cross_module": cross,
            "n_modules": len(repo.modules),
            "depth": len(p.chain),
        },
    )


def _pick(planted: list[Planted], k: int, rng: random.Random) -> list[Planted]:
    """Up to k bugs in distinct functions with distinct failing sets (the clean stage
    dedupes two bugs that fail the same tests on one snapshot), operators taken in turn:
    drawn uniformly, the operators with many sites (constants, returns) would crowd out
    the rare ones (conditions, comparisons)."""
    by_op: dict[str, list[Planted]] = {}
    for p in planted:
        by_op.setdefault(p.mutation.operator, []).append(p)
    ops = sorted(by_op)
    rng.shuffle(ops)
    for op in ops:
        rng.shuffle(by_op[op])
    out: list[Planted] = []
    used: set = set()

    def keys(p: Planted) -> set:
        return {p.fn.name, frozenset(f[0] for f in p.failing)}

    while len(out) < k and any(by_op.values()):
        for op in ops:
            while by_op[op] and keys(by_op[op][-1]) & used:
                by_op[op].pop()
            if by_op[op] and len(out) < k:
                p = by_op[op].pop()
                out.append(p)
                used |= keys(p)
    return out


def generate_repo_tasks(
    n: int,
    seed: int,
    *,
    min_modules: int = 2,
    max_modules: int = 4,
    max_depth: int = 3,
    max_distance: int = 2,
    tasks_per_repo: int = 3,
    operators: tuple[str, ...] | list[str] | None = None,
) -> tuple[list[Task], dict[str, dict[str, str]]]:
    """``n`` repository tasks and the pristine trees they stand on (sha -> files).

    Repository ``i`` of seed ``s`` is generated from the string ``"s:i"``, so two seeds
    never share a repository (the held-out sets are other seeds), and the output is
    the same on every machine for the same arguments. ``operators`` (e.g. ``REPAIRABLE``)
    limits the planted bugs' kinds; None plants any of ``mutate.OPERATORS``."""
    if operators is not None and (not operators or set(operators) - set(OPERATORS)):
        raise ValueError(f"operators must be a non-empty subset of {OPERATORS}: {operators}")
    if not 2 <= min_modules <= max_modules <= len(MODULES):
        raise ValueError(f"modules must satisfy 2 <= min <= max <= {len(MODULES)}")
    tasks: list[Task] = []
    trees: dict[str, dict[str, str]] = {}
    i = 0
    while len(tasks) < n:
        if i > 20 * n + 20:
            raise RuntimeError(f"synthetic repos: only {len(tasks)} of {n} tasks after {i} repos")
        repo_seed = f"{seed}:{i}"
        rng = random.Random(hashlib.sha256(repo_seed.encode()).hexdigest())
        repo = generate_repo(repo_seed, rng.randint(min_modules, max_modules), max_depth)
        sha = files_hash(repo.files)
        planted = plant_bugs(repo, max_distance, operators)
        chosen = _pick(planted, min(tasks_per_repo, n - len(tasks)), rng)
        if chosen:
            trees[sha] = repo.files
        for j, p in enumerate(chosen):
            prov = {"generator": GENERATOR_VERSION, "seed": seed, "repo_seed": repo_seed,
                    "row": len(tasks) + 1}
            tasks.append(_task(repo, sha, p, f"synthrepo/{seed}/{i}/{j}", prov))
        i += 1
    return tasks, trees
