"""Git-style text diffs of single files (``diff --git a/x b/x``), for generated patches.

The agent's patches module (codeloop.agent.patches) diffs and applies whole trees; the
generators only need one file's change as text, without a tree on disk."""

from __future__ import annotations

import difflib


def file_diff(path: str, old: str, new: str, context: int = 3) -> str:
    """A ``git apply``-able diff turning ``old`` into ``new`` at ``path`` ('' when equal)."""
    if old == new:
        return ""
    a, b = old.splitlines(keepends=True), new.splitlines(keepends=True)
    body = list(difflib.unified_diff(a, b, f"a/{path}", f"b/{path}", n=context))
    out = [f"diff --git a/{path} b/{path}\n"]
    for line in body:
        out.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return "".join(out)


class DiffError(ValueError):
    """A diff that does not apply to the text it is meant for."""


def split_files(patch: str) -> dict[str, list[str]]:
    """A multi-file git diff as path -> its lines (from its ``diff --git`` header on)."""
    out: dict[str, list[str]] = {}
    cur: list[str] | None = None
    for line in patch.splitlines(keepends=True):
        if line.startswith("diff --git "):
            path = line.split(" b/", 1)[1].rstrip("\n") if " b/" in line else line[11:].strip()
            cur = out.setdefault(path, [])
        if cur is not None:
            cur.append(line)
    return out


def hunks(lines: list[str]) -> list[list[str]]:
    """The hunks (lines after each ``@@`` header) of one file's diff lines."""
    out: list[list[str]] = []
    for line in lines:
        if line.startswith("@@"):
            out.append([])
        elif out and line[:1] in (" ", "-", "+", "\\"):
            out[-1].append(line)
    return out


def apply_file_diff(text: str, lines: list[str]) -> str:
    """Apply one file's diff lines to ``text`` strictly (every context line must match)."""
    src = text.splitlines(keepends=True)
    out: list[str] = []
    pos = 0
    for hunk in hunks(lines):
        old = [x[1:] for x in hunk if x[:1] in (" ", "-")]
        new = [x[1:] for x in hunk if x[:1] in (" ", "+")]
        at = next(
            (i for i in range(pos, len(src) - len(old) + 1) if src[i : i + len(old)] == old), -1
        )
        if at < 0:
            raise DiffError(f"hunk does not apply: {''.join(old)[:200]!r}")
        out += src[pos:at] + new
        pos = at + len(old)
    return "".join(out + src[pos:])
