"""Differential tests of a synthetic repository: each function called directly on inputs
drawn by type-aware mutation (codeloop.data.testinputs), expecting the pristine tree's
outputs.

The chain tests only call the top of each chain with a few small arguments, so a bug in a
leaf that those arguments never reach goes unseen; these tests call every function,
leaves included, on edge values (0, negatives, huge ints, empty and singleton lists). The
file is hidden from the agent like ``tests/test_hidden.py``. Nothing here knows synth's
types: callers pass a namespace the modules were executed into (synth._namespace) and
the functions' names, modules and seed arguments.
"""

from __future__ import annotations

import random

from codeloop.data.testinputs import call_source, candidate_inputs

DIFF_FILE = "tests/test_differential.py"
PER_FUNCTION = 4  # tests per function: plain calls, so a repo adds well under a second
N_RANDOM = 4  # random argument tuples drawn besides the mutated ones
MAX_OUTPUT_REPR = 400  # an expected value longer than this would bloat the test file
RANGE_CAP = 1_000  # the largest bound a range() may take while expected values are computed


def capped_range(*args: int) -> range:
    """range(), refusing a bound over RANGE_CAP in size, even for an empty range.

    ``range`` is the one construct of the templates whose cost grows with an argument:
    ``upto(10**9)`` would build a list of a billion ints, so such an input raises here and
    is dropped like any raising input. The bound, not the length, is capped: ``upto(-10**9)``
    is empty, but a planted ``swap_args`` turns it into ``range(-10**9, k)``, which the
    buggy tree would build in the judge's sandbox. With every bound within RANGE_CAP on the
    pristine tree, a mutation (a bound moved by one, two arguments swapped) keeps each
    range of the buggy tree within 2 * RANGE_CAP items."""
    if any(abs(a) > RANGE_CAP for a in args):
        raise OverflowError(f"range{args}: a bound over {RANGE_CAP}")
    return range(*args)


def cap_ranges(ns: dict) -> dict:
    """``ns`` with its functions' ``range`` capped (globals are looked up at call time)."""
    ns["range"] = capped_range
    return ns


def reference_cases(ns: dict, name: str, seen: list[tuple], rng: random.Random) -> list[tuple]:
    """Up to PER_FUNCTION (args, value) pairs of ``ns[name]``: the ``seen`` tuples and
    their type-aware mutations and random look-alikes, shuffled; inputs on which the
    function raises, or whose value's repr is over MAX_OUTPUT_REPR, are skipped."""
    pool = list(seen) + candidate_inputs(seen, rng, N_RANDOM)
    rng.shuffle(pool)
    out: list[tuple] = []
    for args in pool:
        try:
            value = ns[name](*args)
        except Exception:  # behaviour the pristine tree does not define: no test of it
            continue
        if len(repr(value)) <= MAX_OUTPUT_REPR:
            out.append((args, value))
        if len(out) == PER_FUNCTION:
            break
    return out


def case_name(name: str, k: int) -> str:
    """The test of the k-th (from 0) case of function ``name``."""
    return f"test_{name}_{k + 1}"


def tests_source(package: str, cases: list[tuple[str, str, str, tuple, object]]) -> str:
    """The test module of (test name, module, function, args, expected) cases, in order,
    importing each function as ``from <package>.<module> import <function>``."""
    imports = sorted({(mod, fn) for _, mod, fn, _, _ in cases})
    head = [f"from {package}.{mod} import {fn}" for mod, fn in imports]
    bodies = [
        f"def {test}():\n    assert {call_source(fn, args)} == {expected!r}\n"
        for test, _, fn, args, expected in cases
    ]
    return "\n".join(head) + "\n\n\n" + "\n\n".join(bodies)
