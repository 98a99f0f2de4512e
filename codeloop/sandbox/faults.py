"""Batch-then-retry fault isolation for sandbox work, written once for every caller."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from codeloop.sandbox.base import SandboxError

T = TypeVar("T")
R = TypeVar("R")


def isolate_faults(
    batch: Callable[[list[T]], Sequence[R]],
    one: Callable[[T], R],
    items: list[T],
    errors: tuple[type[Exception], ...] = (SandboxError,),
) -> list[R | Exception]:
    """``batch(items)`` at once; if that raises one of ``errors`` (or answers a different
    number of results), ``one(item)`` for each, so only the faulty item(s) carry the error
    (in their place, as the exception)."""
    try:
        out = list(batch(items))
        if len(out) != len(items):
            raise SandboxError(f"batch returned {len(out)} results for {len(items)} items")
        return out
    except (SandboxError, *errors):
        out = []
        for item in items:
            try:
                out.append(one(item))
            except errors as exc:
                out.append(exc)
        return out
