"""The order a repository's own pytest run puts its tests in.

A suite's tests can depend on their order: six's ``test_lazy`` asserts that ``html.parser``
is not imported yet, which holds only while the tests that import it run later, as they do
in the file. pytest runs named node ids in the order they are named, so a judge naming the
FAIL_TO_PASS tests before the PASS_TO_PASS ones fails such a test for every fix, honest or
not. Named in the repository's order (files as pytest walks a directory: each path part
sorted by name; tests where they are defined in their file), the run sees what the
repository's own run sees.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from codeloop.agent.canaries import find_def, parse_node_id, read_source


def suite_order(ids: list[str], read: Callable[[str], bytes | None]) -> list[str]:
    """``ids`` sorted as the repository's own run would meet them; ``read(path)`` gives a
    test file's bytes (None when unreadable). An id whose definition is not found (an
    inherited method, a generated test, a file that is not plain Python) keeps its place
    after its file's found tests, in the order given; the sort is stable, so the cases of
    one parametrized test keep theirs."""
    sources: dict[str, object] = {}

    def key(node: str) -> tuple:
        parsed = parse_node_id(node)
        path = parsed.path if parsed else node.split("::", 1)[0]
        if path not in sources:
            data = read(path)
            sources[path] = read_source(data) if data is not None else None
        return (tuple(path.split("/")), _position(sources[path], parsed))

    return sorted(ids, key=key)


def _position(src, parsed) -> tuple:
    """Where the test is defined: the line of each enclosing class, then of the def."""
    found = find_def(src, parsed.classes, parsed.name) if src is not None and parsed else None
    if found is None:
        return (math.inf,)
    scopes, fn = found
    return (*(c.lineno for c in scopes), fn.lineno)
