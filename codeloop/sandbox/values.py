"""Parent-side value handling: decode the child's tagged plain data, compare, check output.

The child sends values as JSON with one-letter tags for non-JSON types (see
``harness._encode``). Decoding rebuilds exact stdlib types only, so every comparison the
parent makes runs stdlib code on stdlib data; no object of the model's can take part.
"""

from __future__ import annotations

import collections
import decimal
import fractions
import math
from typing import Any

REL_TOL = 1e-6
ABS_TOL = 1e-9


class BadValue(ValueError):
    """The child sent something that is not a well-formed encoded value."""


def decode(v: Any) -> Any:
    """Tagged JSON (from the child) -> exact stdlib value; raise BadValue if malformed."""
    t = type(v)
    if v is None or t in (bool, int, float, str):
        return v
    if t is list:
        return [decode(x) for x in v]
    if t is not dict or len(v) != 1:
        raise BadValue(f"unexpected encoded value {str(v)[:80]!r}")
    tag, body = next(iter(v.items()))
    try:
        return _DECODERS[tag](body)
    except KeyError:
        raise BadValue(f"unknown tag {tag!r}") from None
    except (TypeError, ValueError, decimal.InvalidOperation, ZeroDivisionError) as exc:
        raise BadValue(f"malformed {tag!r} value: {exc}") from None


def _pairs(body: Any) -> list[tuple[Any, Any]]:
    return [(decode(k), decode(x)) for k, x in body]


_DECODERS = {
    "d": lambda b: dict(_pairs(b)),
    "C": lambda b: collections.Counter(dict(_pairs(b))),
    "O": lambda b: collections.OrderedDict(_pairs(b)),
    "D": lambda b: collections.defaultdict(None, _pairs(b)),
    "t": lambda b: tuple(decode(x) for x in b),
    "s": lambda b: {decode(x) for x in b},
    "f": lambda b: frozenset(decode(x) for x in b),
    "q": lambda b: collections.deque(decode(x) for x in b),
    "b": lambda b: str(b).encode("latin-1"),
    "B": lambda b: bytearray(str(b).encode("latin-1")),
    "c": lambda b: complex(float(b[0]), float(b[1])),
    "r": lambda b: range(int(b[0]), int(b[1]), int(b[2])),
    "M": lambda b: decimal.Decimal(str(b)),
    "R": lambda b: fractions.Fraction(int(b[0]), int(b[1])),
}

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
