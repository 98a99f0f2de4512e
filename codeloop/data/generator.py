"""Procedural generator of small Python function tasks (the embedded default corpus).

A task composes ``depth`` simple operations on one argument (an int, a list of ints or a
string): "Write a function calc_3f2a(x) that adds 3 to x, then doubles it". The reference
solution is one line per operation, so a tiny model can learn the phrase -> line mapping
and difficulty grows with the composition depth (the knob buckets can rely on).

Expected outputs are computed by Python callables kept beside each operation's code
template, never by exec'ing generated code, so the generator needs no sandbox.
Deterministic per (n, seed, max_depth). Tests all land in ``visible_tests``; the clean
stage splits them into visible and hidden.
"""

from __future__ import annotations

import ast
import hashlib
import random
import re
from collections.abc import Callable
from dataclasses import dataclass

from codeloop.schema import Task

GENERATOR_VERSION = "synth-v2"


@dataclass(frozen=True)
class Op:
    """One operation: input/output type, code line template, phrasings, semantics."""

    name: str
    t_in: str  # "int" | "list" | "str"
    t_out: str
    code: str  # uses {a} for the argument name and {k} for the constant
    phrases: tuple[str, ...]  # phrasings; {a} and {k} as in code
    fn: Callable
    ks: tuple = (None,)  # allowed constants (None: no constant)


def _r(lo: int, hi: int) -> tuple[int, ...]:
    return tuple(range(lo, hi + 1))


OPS: tuple[Op, ...] = (
    # int -> int
    Op("add", "int", "int", "{a} = {a} + {k}", ("adds {k} to it",), lambda v, k: v + k, _r(1, 9)),
    Op("sub", "int", "int", "{a} = {a} - {k}", ("subtracts {k} from it",), lambda v, k: v - k, _r(1, 9)),
    Op("mul", "int", "int", "{a} = {a} * {k}", ("multiplies it by {k}",), lambda v, k: v * k, _r(2, 7)),
    Op("fdiv", "int", "int", "{a} = {a} // {k}", ("floor-divides it by {k}",), lambda v, k: v // k, _r(2, 6)),
    Op("mod", "int", "int", "{a} = {a} % {k}", ("takes it modulo {k}",), lambda v, k: v % k, _r(2, 9)),
    Op("square", "int", "int", "{a} = {a} * {a}", ("squares it",), lambda v, k: v * v),
    Op("neg", "int", "int", "{a} = -{a}", ("negates it",), lambda v, k: -v),
    Op("abs", "int", "int", "{a} = abs({a})", ("takes its absolute value",), lambda v, k: abs(v)),
    Op("max", "int", "int", "{a} = max({a}, {k})", ("takes the larger of it and {k}",), lambda v, k: max(v, k), _r(0, 9)),
    Op("min", "int", "int", "{a} = min({a}, {k})", ("takes the smaller of it and {k}",), lambda v, k: min(v, k), _r(0, 9)),
    # list -> list
    Op("rev", "list", "list", "{a} = {a}[::-1]", ("reverses it",), lambda v, k: v[::-1]),
    Op("sort", "list", "list", "{a} = sorted({a})", ("sorts it in ascending order",), lambda v, k: sorted(v)),
    Op("ladd", "list", "list", "{a} = [v + {k} for v in {a}]", ("adds {k} to every item",), lambda v, k: [e + k for e in v], _r(1, 9)),
    Op("lmul", "list", "list", "{a} = [v * {k} for v in {a}]", ("multiplies every item by {k}",), lambda v, k: [e * k for e in v], _r(2, 5)),
    Op("even", "list", "list", "{a} = [v for v in {a} if v % 2 == 0]", ("keeps only the even items",), lambda v, k: [e for e in v if e % 2 == 0]),
    Op("gt", "list", "list", "{a} = [v for v in {a} if v > {k}]", ("keeps only the items greater than {k}",), lambda v, k: [e for e in v if e > k], _r(0, 6)),
    Op("take", "list", "list", "{a} = {a}[:{k}]", ("keeps its first {k} items",), lambda v, k: v[:k], _r(1, 4)),
    Op("drop", "list", "list", "{a} = {a}[{k}:]", ("drops its first {k} items",), lambda v, k: v[k:], _r(1, 3)),
    # list -> int
    Op("sum", "list", "int", "{a} = sum({a})", ("sums its items",), lambda v, k: sum(v)),
    Op("len", "list", "int", "{a} = len({a})", ("counts its items",), lambda v, k: len(v)),
    Op("lmax", "list", "int", "{a} = max({a}, default=0)", ("takes its largest item (0 if empty)",), lambda v, k: max(v, default=0)),
    Op("count", "list", "int", "{a} = {a}.count({k})", ("counts how often {k} occurs in it",), lambda v, k: v.count(k), _r(0, 5)),
    # str -> str
    Op("upper", "str", "str", "{a} = {a}.upper()", ("converts it to upper case",), lambda v, k: v.upper()),
    Op("srev", "str", "str", "{a} = {a}[::-1]", ("reverses it",), lambda v, k: v[::-1]),
    Op("suffix", "str", "str", "{a} = {a} + {k!r}", ("appends {k!r} to it",), lambda v, k: v + k, ("ab", "x", "ing", "!", "zz")),
    Op("prefix", "str", "str", "{a} = {k!r} + {a}", ("puts {k!r} in front of it",), lambda v, k: k + v, ("re", "un", "a", "_")),
    Op("repeat", "str", "str", "{a} = {a} * {k}", ("repeats it {k} times",), lambda v, k: v * k, _r(2, 3)),
    Op("stake", "str", "str", "{a} = {a}[:{k}]", ("keeps its first {k} characters",), lambda v, k: v[:k], _r(1, 4)),
    Op("replace", "str", "str", "{a} = {a}.replace('a', {k!r})", ("replaces every 'a' in it with {k!r}",), lambda v, k: v.replace("a", k), ("o", "e", "")),
    # str -> int
    Op("slen", "str", "int", "{a} = len({a})", ("takes its length",), lambda v, k: len(v)),
    Op("scount", "str", "int", "{a} = {a}.count({k!r})", ("counts the {k!r} characters in it",), lambda v, k: v.count(k), ("a", "e", "o")),
)

# One argument name per type, one opening, one joiner, one phrase per op and one-digit
# constants (one BPE token each, copied as is from prompt to code) (synth-v2):
# the corpus is for a ~1M-parameter model trained for minutes, so the language is as
# regular as a spec. Variety lives in the programs (ops, constants, depth), which is
# what the difficulty knob and GRPO need; v1's synonyms and arg-name copying left the
# SFT'd model passing nothing.
ARG_NAMES = {"int": "x", "list": "xs", "str": "s"}
TYPE_WORDS = {"int": "an integer", "list": "a list of integers", "str": "a string"}
FN_STEMS = ("calc", "transform", "process", "compute", "apply", "convert", "shape", "chain")
OPENING = "Write a function"
JOINER = ", then "
NAME_WORDS = (
    "red",
    "blue",
    "green",
    "fast",
    "slow",
    "big",
    "small",
    "left",
    "right",
    "up",
    "down",
    "one",
    "two",
    "alpha",
    "beta",
    "gamma",
    "delta",
    "inner",
    "outer",
    "main",
    "extra",
    "basic",
    "final",
    "quick",
    "plain",
    "smart",
    "tiny",
    "magic",
    "prime",
)
_WORDS = (
    "apple",
    "banana",
    "cat",
    "data",
    "eagle",
    "java",
    "kayak",
    "lemon",
    "mango",
    "pasta",
    "radar",
    "sugar",
    "table",
    "zebra",
    "alpha",
    "omega",
    "abc",
    "",
    "a",
    "code",
)


def _sample_input(rng: random.Random, t: str):
    if t == "int":
        return rng.randint(-20, 40)
    if t == "list":
        return [rng.randint(-5, 12) for _ in range(rng.randint(0, 6))]
    return rng.choice(_WORDS)


def _chain(rng: random.Random, depth: int) -> tuple[str, list[tuple[Op, object]]]:
    """Pick a start type and `depth` type-compatible ops with their constants."""
    t0 = rng.choice(("int", "int", "list", "str"))
    t, chain = t0, []
    for _ in range(depth):
        # Why exclude a repeat: "sorts it, then sorts it" is noise, not difficulty.
        prev = chain[-1][0].name if chain else ""
        cands = [op for op in OPS if op.t_in == t and op.name != prev]
        op = rng.choice(cands)
        chain.append((op, rng.choice(op.ks)))
        t = op.t_out
    return t0, chain


def _render(rng: random.Random, t0: str, chain: list[tuple[Op, object]]) -> tuple[str, str, str]:
    """Return (function name, prompt, reference solution) for one chain."""
    arg = ARG_NAMES[t0]
    # Word suffixes, not hex: a tiny model copies a name of 2-3 BPE tokens from the
    # prompt reliably, while random hex splits into arbitrary byte pieces.
    name = f"{rng.choice(FN_STEMS)}_{rng.choice(NAME_WORDS)}"
    steps = [rng.choice(op.phrases).format(a=arg, k=k) for op, k in chain]
    body = [f"    {op.code.format(a=arg, k=k)}" for op, k in chain]
    prompt = (
        f"{OPENING} {name}({arg}) that takes {TYPE_WORDS[t0]} {arg}, "
        f"{JOINER.join(steps)}, and returns the result."
    )
    solution = "\n".join([f"def {name}({arg}):", *body, f"    return {arg}"]) + "\n"
    return name, prompt, solution


def _tests(rng: random.Random, name: str, t0: str, chain, n_tests: int) -> list[str] | None:
    """Asserts on distinct random inputs; None when the chain is (nearly) constant."""
    seen, tests, outs = set(), [], set()
    for _ in range(n_tests * 6):
        v = _sample_input(rng, t0)
        key = repr(v)
        if key in seen:
            continue
        seen.add(key)
        out = v
        for op, k in chain:
            out = op.fn(out, k)
        if isinstance(out, int) and abs(out) > 10**9:
            return None
        outs.add(repr(out))
        tests.append(f"assert {name}({key}) == {out!r}")
        if len(tests) == n_tests:
            break
    # Why: a chain whose outputs barely vary rewards returning a constant (reward hacking).
    if len(tests) < 5 or len(outs) < 3:
        return None
    return tests


def generate_tasks(n: int, seed: int = 0, max_depth: int = 3) -> list[Task]:
    """Generate `n` distinct tasks, depths 1..max_depth weighted towards easy.

    Depth d gets weight max_depth - d + 1 (3:2:1 for max_depth 3): a tiny policy needs
    many short programs to learn the phrase -> line mapping that deeper ones compose.
    """
    if n < 0 or max_depth < 1:
        raise ValueError(f"generate_tasks: need n >= 0 and max_depth >= 1 (got {n}, {max_depth})")
    rng = random.Random(f"{GENERATOR_VERSION}:{seed}:{max_depth}")
    tasks: list[Task] = []
    seen_chains: set[tuple] = set()
    misses = [0] * (max_depth + 2)  # consecutive failed draws per depth
    schedule = [d for d in range(1, max_depth + 1) for _ in range(max_depth - d + 1)]
    while len(tasks) < n:
        depth = schedule[len(tasks) % len(schedule)]
        # Shallow depths hold few distinct programs (~140 at depth 1): once one is
        # exhausted its slots go to the next depth instead of looping forever.
        while depth <= max_depth and misses[depth] > 60:
            depth += 1
        if depth > max_depth:
            raise ValueError(
                f"generate_tasks: cannot find {n} distinct tasks at max_depth={max_depth}"
            )
        t0, chain = _chain(rng, depth)
        key = (t0, tuple((op.name, k) for op, k in chain))
        tests = None
        if key not in seen_chains:  # the same program under another name is a duplicate
            name, prompt, solution = _render(rng, t0, chain)
            tests = _tests(rng, name, t0, chain, rng.randint(5, 8))
        if tests is None:
            misses[depth] += 1
            continue
        misses[depth] = 0
        seen_chains.add(key)
        digest = hashlib.sha256(f"{prompt}\n{solution}".encode()).hexdigest()[:12]
        tasks.append(
            Task(
                task_id=f"synth/{digest}",
                source="synthetic",
                prompt=prompt,
                entry_point=name,
                io_style="function",
                reference_solution=solution,
                visible_tests=tests,
                difficulty=depth,
                metadata={
                    "license": "CC0 (generated)",
                    "provenance": {
                        "generator": GENERATOR_VERSION,
                        "seed": seed,
                        "max_depth": max_depth,
                        "index": len(tasks),
                    },
                    "ops": [op.name for op, _ in chain],
                },
            )
        )
    return tasks


# ---------------------------------------------------------------- wrong programs


def _parse_chain(task: Task) -> tuple[str, str, list[tuple[Op, object]]] | None:
    """(def line, arg, chain) recovered from a generated reference solution, else None."""
    lines = task.reference_solution.strip("\n").splitlines()
    types = {a: t for t, a in ARG_NAMES.items()}
    head = re.fullmatch(r"def \w+\((\w+)\):", lines[0]) if lines else None
    if not head or head.group(1) not in types:
        return None
    arg, t = head.group(1), types[head.group(1)]
    chain = []
    for line in lines[1:-1]:
        hit = next(
            ((op, k) for op in OPS if op.t_in == t for k in op.ks
             if f"    {op.code.format(a=arg, k=k)}" == line),
            None,
        )
        if hit is None:
            return None
        chain.append(hit)
        t = hit[0].t_out
    return lines[0], arg, chain


def _test_io(test: str) -> tuple[object, object] | None:
    """(input, expected) of an ``assert f(<input>) == <expected>`` line."""
    try:
        cmp = ast.parse(test).body[0].test
        return ast.literal_eval(cmp.left.args[0]), ast.literal_eval(cmp.comparators[0])
    except (SyntaxError, AttributeError, IndexError, ValueError):
        return None


def _mutate(rng: random.Random, chain: list[tuple[Op, object]]) -> list[tuple[Op, object]]:
    """One slip of the kind a small model makes: a wrong constant, op, or a dropped step."""
    i = rng.randrange(len(chain))
    op, k = chain[i]
    kind = rng.choice(("const", "op", "drop"))
    if kind == "const" and len(op.ks) > 1:
        return [*chain[:i], (op, rng.choice([c for c in op.ks if c != k])), *chain[i + 1 :]]
    if kind == "drop" and len(chain) > 1 and op.t_in == op.t_out:
        return chain[:i] + chain[i + 1 :]
    alts = [o for o in OPS if o.t_in == op.t_in and o.t_out == op.t_out and o.name != op.name]
    alt = rng.choice(alts)
    return [*chain[:i], (alt, rng.choice(alt.ks)), *chain[i + 1 :]]


def wrong_solution(task: Task, rng: random.Random) -> tuple[str, str, object] | None:
    """A plausible wrong program for a generated task, for revise-turn SFT.

    Returns (code, first failing visible test, the value the code returns there), or
    None when the task is not a generated one or no slip changes a test's outcome.
    Values come from the ops' Python semantics (no sandbox), as the tests' do.
    """
    parsed = _parse_chain(task)
    ios = [_test_io(t) for t in task.visible_tests]
    if parsed is None or not parsed[2] or any(io is None for io in ios):
        return None
    head, arg, chain = parsed
    for _ in range(8):
        wrong = _mutate(rng, chain)
        for test, (value, expected) in zip(task.visible_tests, ios, strict=True):
            try:
                for op, k in wrong:
                    value = op.fn(value, k)
            except Exception:  # a slip that would raise: try another one
                break
            if value != expected:
                body = [f"    {op.code.format(a=arg, k=k)}" for op, k in wrong]
                return "\n".join([head, *body, f"    return {arg}"]) + "\n", test, value
    return None
