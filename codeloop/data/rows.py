"""Row helpers shared by the dataset loaders: a field error that names its field, typed
field access, and the licences and test cap of each source (codeloop.data.loaders)."""

from __future__ import annotations

from typing import Any

from codeloop.data.validate import wrong_type

LICENSES = {
    "humaneval": "MIT",
    "mbpp": "CC-BY-4.0",
    "apps": "MIT",
    "taco": "Apache-2.0",
    "codecontests": "CC-BY-4.0",
    "synthetic": "Apache-2.0",
}
MAX_TESTS = 50  # contest rows carry hundreds of generated tests; 50 judge well and run fast


class RowError(ValueError):
    def __init__(self, field_name: str, reason: str):
        super().__init__(reason)
        self.field = field_name
        self.reason = reason


def require(rec: dict, *names: str) -> str:
    """The first of ``names`` present and non-empty in rec, a string, or RowError naming it."""
    found = [n for n in names if rec.get(n) not in (None, "", [])]
    if not found:
        raise RowError(names[0], f"missing field {names[0]!r}")
    return typed(rec, found[0], "string")


def typed(rec: dict, name: str, expected: str, default: Any = None) -> Any:
    """rec[name] (default when absent or null) if it has the expected JSON type, else
    RowError naming the field and both types."""
    value = rec.get(name)
    if value is None and default is not None:
        return default
    reason = wrong_type(value, expected)
    if reason:
        raise RowError(name, reason)
    return value
