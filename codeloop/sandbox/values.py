"""Parent-side value handling: decode the child's tagged plain data, compare, check output.

The child sends values as JSON with one-letter tags for non-JSON types (see
``harness._encode``). Decoding (``harness.decode``) rebuilds exact stdlib types only, so every comparison the
parent makes runs stdlib code on stdlib data; no object of the model's can take part.
"""

from __future__ import annotations

import collections
import math
from typing import Any

from codeloop.sandbox.harness import BadValue, decode  # one wire format, both directions

__all__ = ["BadValue", "decode", "output_matches", "short_repr", "values_equal"]

REL_TOL = 1e-6
ABS_TOL = 1e-9


_NUMBERS = (bool, int, float, complex)
_DICTS = (dict, collections.Counter, collections.OrderedDict, collections.defaultdict)


def _close(a: Any, b: Any) -> bool:
    if isinstance(a, complex) or isinstance(b, complex):
        a, b = complex(a), complex(b)
        return _close(a.real, b.real) and _close(a.imag, b.imag)
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return math.isclose(a, b, rel_tol=REL_TOL, abs_tol=ABS_TOL)


def values_equal(a: Any, b: Any) -> bool:
    """Python ``==`` on plain data, except that floats compare with a tolerance."""
    ta, tb = type(a), type(b)
    if ta in _NUMBERS and tb in _NUMBERS and (ta in (float, complex) or tb in (float, complex)):
        return _close(a, b)
    if ta in (list, tuple, collections.deque) and ta is tb:
        return len(a) == len(b) and all(values_equal(x, y) for x, y in zip(a, b, strict=True))
    if ta in _DICTS and tb in _DICTS:
        if ta is collections.OrderedDict and tb is collections.OrderedDict:
            if list(a) != list(b):
                return False
        if ta is collections.Counter or tb is collections.Counter:
            return a == b  # Counter equality ignores zero counts (Python >= 3.10)
        return a.keys() == b.keys() and all(values_equal(a[k], b[k]) for k in a)
    return a == b


def _float_token(s: str) -> float | None:
    try:
        return float(s)
    except ValueError:
        return None


def output_matches(got: str, expected: str) -> bool:
    """stdio checker: whitespace-insensitive lines/tokens, numbers with a float tolerance."""
    g_lines = [ln.rstrip() for ln in got.strip().splitlines()]
    e_lines = [ln.rstrip() for ln in expected.strip().splitlines()]
    if g_lines == e_lines:
        return True
    g_tok, e_tok = got.split(), expected.split()
    if len(g_tok) != len(e_tok):
        return False
    for g, e in zip(g_tok, e_tok, strict=True):
        if g == e:
            continue
        gf, ef = _float_token(g), _float_token(e)
        if gf is None or ef is None or not _close(gf, ef):
            return False
    return True


def short_repr(v: Any, limit: int = 200) -> str:
    """repr of a decoded (stdlib-only) value, cut to ``limit`` characters."""
    try:
        r = repr(v)
    except (RecursionError, ValueError) as exc:
        r = f"<unprintable: {exc}>"
    return r if len(r) <= limit else r[: limit - 3] + "..."
