"""New test inputs from a task's own: read the call arguments its asserts make, mutate them
by type, and draw small random values of the same types.

Everything here is deterministic for a given ``random.Random``: augmentation seeds it from
the task id, so the same task gives the same candidate inputs on every machine. Values are
plain literals (what ``ast.literal_eval`` reads) and nothing is executed here; the
reference runs on the candidates in the sandbox (``codeloop.data.augment``).
"""

from __future__ import annotations

import ast
import random
from typing import Any

BIG = 10**9
UNICODE = ("é", "ß", "中", "😀", "\u200b")
MAX_LEN = 50  # a mutated sequence or string never grows past this
MAX_REPR = 400  # a candidate's argument text is at most this long


def calls_of(test: str, entry_point: str) -> list[tuple[Any, ...]]:
    """Argument tuples of every ``entry_point(...)`` call in ``test`` whose arguments are
    all positional literals (keyword or computed arguments are skipped)."""
    try:
        tree = ast.parse(test.strip())
    except (SyntaxError, ValueError):
        return []
    out = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
            continue
        if node.func.id != entry_point or node.keywords:
            continue
        try:
            out.append(tuple(ast.literal_eval(a) for a in node.args))
        except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
            continue
    return out


def _ints(v: int) -> list[int]:
    return [0, 1, -1, v + 1, v - 1, -v, 2 * v, BIG, -BIG]


def _floats(v: float) -> list[float]:
    return [0.0, -v, v + 1.0, v / 2, 1e-9, 1e9]


def _strs(v: str) -> list[str]:
    out = ["", v[:1], v * 2, v[::-1], v.upper(), v + " ", UNICODE[len(v) % len(UNICODE)] + v]
    return [s[:MAX_LEN] for s in out]


def _seqs(v: list | tuple, rng: random.Random) -> list:
    kind = type(v)
    items = list(v)
    out: list = [[], items[:1], sorted(items, key=repr), items[::-1], items + items[:1]]
    if items:
        i = rng.randrange(len(items))
        out += [items[:i] + [m] + items[i + 1 :] for m in mutate_value(items[i], rng)[:2]]
    return [kind(x[:MAX_LEN]) for x in out]


def _dicts(v: dict, rng: random.Random) -> list[dict]:
    out: list[dict] = [{}]
    if v:
        keys = list(v)
        k = keys[rng.randrange(len(keys))]
        out.append({kk: vv for kk, vv in v.items() if kk != k})
        out += [{**v, k: m} for m in mutate_value(v[k], rng)[:2]]
    return out


def mutate_value(v: Any, rng: random.Random) -> list[Any]:
    """Edge values of v's own type (nested containers mutated one element deep)."""
    if isinstance(v, bool):
        return [not v]
    if isinstance(v, int):
        return _ints(v)
    if isinstance(v, float):
        return _floats(v)
    if isinstance(v, str):
        return _strs(v)
    if isinstance(v, (list, tuple)):
        return _seqs(v, rng)
    if isinstance(v, dict):
        return _dicts(v, rng)
    if isinstance(v, (set, frozenset)):
        return [type(v)(), type(v)(list(v)[:1])]
    return []


def random_like(v: Any, rng: random.Random, depth: int = 0) -> Any:
    """A small random value of v's type (element types taken from v's first element)."""
    if isinstance(v, bool):
        return rng.random() < 0.5
    if isinstance(v, int):
        return rng.randint(-20, 20)
    if isinstance(v, float):
        return round(rng.uniform(-20, 20), 3)
    if isinstance(v, str):
        return "".join(rng.choice("abcxyz AZ09") for _ in range(rng.randint(0, 8)))
    if isinstance(v, (list, tuple)) and depth < 3:
        proto = v[0] if v else 0
        return type(v)(random_like(proto, rng, depth + 1) for _ in range(rng.randint(0, 6)))
    return v


def _fits(args: tuple) -> bool:
    return len(repr(args)) <= MAX_REPR


def candidate_inputs(seen: list[tuple[Any, ...]], rng: random.Random, n_random: int) -> list[tuple]:
    """Distinct new argument tuples: each seen tuple with one argument mutated at a time,
    then ``n_random`` random tuples shaped like the seen ones; none equals a seen tuple."""
    known = {repr(a) for a in seen}
    out: list[tuple] = []

    def add(args: tuple) -> None:
        key = repr(args)
        if key not in known and _fits(args):
            known.add(key)
            out.append(args)

    for args in seen:
        for i, v in enumerate(args):
            for m in mutate_value(v, rng):
                add(args[:i] + (m,) + args[i + 1 :])
    for _ in range(n_random if seen else 0):
        proto = seen[rng.randrange(len(seen))]
        add(tuple(random_like(v, rng) for v in proto))
    return out


def call_source(entry_point: str, args: tuple) -> str:
    """``f(a, b)`` for an argument tuple (reprs read back by literal_eval)."""
    return f"{entry_point}({', '.join(repr(a) for a in args)})"
