"""How the agent's observations show text: lines numbered as read_file numbers them, and
output cut to the observation budget with a marker saying so (by whole lines where the
output is lines a model may copy from, by chars otherwise).

Apart from the tools so that the scripted expert, which sizes its ranged reads to fit
one observation, renders lines exactly as read_file does without importing the tools.
"""

from __future__ import annotations

from collections.abc import Callable


def truncate(text: str, budget: int) -> tuple[str, bool]:
    """``text`` cut to ``budget`` chars (head and tail kept) with a marker saying so."""
    if len(text) <= budget:
        return text, False
    marker = f"\n[... observation truncated: {len(text)} chars, {budget} shown ...]\n"
    keep = max(budget - len(marker), 0)
    head = keep * 2 // 3
    return text[:head] + marker + text[len(text) - (keep - head) :], True


def numbered(lines: list[str], first: int, last: int) -> list[str]:
    """Lines ``first``..``last`` (1-based, inclusive) as read_file shows them."""
    return [f"{i:>5}  {lines[i - 1]}" for i in range(first, last + 1)]


def fit_lines(lines: list[str], budget: int, note: Callable[[int, int], str]) -> tuple[str, bool]:
    """``lines`` joined, or when longer than ``budget`` chars its head and tail lines (two
    thirds and one third of the budget) around ``note(first, last)``: the 0-based span of
    the lines left out. Whole lines only, so a cut never splits a line a model would copy
    into an edit. When not one line fits, the text is cut by chars (``truncate``)."""
    text = "\n".join(lines)
    if len(text) <= budget:
        return text, False

    def take(order: list[int], room: int) -> list[int]:
        kept: list[int] = []
        for i in order:
            room -= len(lines[i]) + 1
            if room < 0:
                break
            kept.append(i)
        return kept

    # room for the lines: the budget less the note at its widest (every line left out)
    room = max(budget - len(note(0, len(lines) - 1)) - 1, 0)
    head = take(list(range(len(lines))), room * 2 // 3)
    used = sum(len(lines[i]) + 1 for i in head)
    tail = take(list(range(len(lines) - 1, len(head) - 1, -1)), room - used)[::-1]
    if not head and not tail:  # a line too long for either end: cut it by chars
        return truncate(text, budget)
    first, last = len(head), (tail[0] if tail else len(lines)) - 1
    parts = [lines[i] for i in head] + [note(first, last)] + [lines[i] for i in tail]
    return "\n".join(parts), True
