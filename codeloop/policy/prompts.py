"""Prompt templates (all in one place) and code extraction from model text.

An episode is one growing text; the model continues it after each marker:

    <|task|>{task prompt}
    Tests:
    {visible tests, one per line}
    <|code|>{signature}{generation 1}<|end|>
    <|feedback|>{status, failing test, got/expected, error}
    <|revise|>{signature}{generation 2}<|end|>
    ...

{signature} is the ``def entry_point(...):`` line of the reference solution when the
solution starts with it (synthetic tasks; HumanEval style), else empty: the model then
writes the body only and never has to copy the name, and the code of a turn is
signature + generation (`extract_code(text, prefix=signature)`).

The embedded tokenizer has these markers as special tokens and <|end|> as EOS, so a
completion stops by itself. A hub model sees the same text; it learns the format in SFT
or through the fenced-block fallback of `extract_code`. Changing any template changes
`PROMPT_TEMPLATE_VERSION` (stamped into every trajectory).
"""

from __future__ import annotations

import ast
import re

from codeloop.schema import Task

PROMPT_TEMPLATE_VERSION = "cl-v3"

TASK = "<|task|>"
CODE = "<|code|>"
END = "<|end|>"
FEEDBACK = "<|feedback|>"
REVISE = "<|revise|>"
PAD = "<|pad|>"
# Agent episodes (codeloop.policy.agent_format): a tool call follows TOOL, a tool's
# output follows OBS. Appended last so the older markers keep their token ids.
TOOL = "<|tool|>"
OBS = "<|obs|>"
SPECIAL_TOKENS = (PAD, TASK, CODE, END, FEEDBACK, REVISE, TOOL, OBS)

MAX_FEEDBACK_CHARS = 400  # keeps multi-turn episodes inside the context window


def signature(task: Task) -> str:
    """The reference's leading ``def <entry_point>(...):`` line plus newline, or ""."""
    first = task.reference_solution.lstrip("\n").split("\n", 1)[0]
    if task.entry_point and re.fullmatch(rf"def {re.escape(task.entry_point)}\(.*\):\s*", first):
        return first.rstrip() + "\n"
    return ""


def task_prompt(task: Task, max_tests: int = 1) -> str:
    """The first-turn prompt: task text, one visible test, the code marker, signature.

    One test, not more (cl-v3): every extra assert is a line of numbers a tiny model must
    learn to ignore when it copies the task's constants; the failing test comes back in
    the feedback of a revise turn anyway.
    """
    tests = "\n".join(task.visible_tests[:max_tests])
    head = f"{TASK}{task.prompt.strip()}\n"
    if tests:
        head += f"Tests:\n{tests}\n"
    return head + CODE + signature(task)


def completion_text(code: str, prefix: str = "") -> str:
    """What the model should produce after the prompt (used by SFT): code minus prefix."""
    code = code.lstrip("\n")
    if prefix and code.startswith(prefix):
        code = code[len(prefix) :]
    return code.rstrip() + "\n" + END


def feedback_body(
    status: str,
    failing_test: str = "",
    got: str = "",
    error: str = "",
    stderr: str = "",
) -> str:
    """What a failed run on visible tests tells the model, one fact a line.

    Only visible information goes here: the status, the failing *visible* test, the
    value our code returned for it and the error message.
    """
    lines = [f"status: {status}"]
    if failing_test:
        lines.append(f"failing test: {failing_test}")
    if got:
        lines.append(f"got: {got}")
    if error:
        lines.append(f"error: {error}")
    elif stderr:
        lines.append(f"stderr: {stderr.strip().splitlines()[-1] if stderr.strip() else ''}")
    return "\n".join(lines)[:MAX_FEEDBACK_CHARS]


def feedback_text(
    status: str,
    failing_test: str = "",
    got: str = "",
    error: str = "",
    stderr: str = "",
    prefix: str = "",
) -> str:
    """Environment feedback after a failed run, ending with the revise marker."""
    body = feedback_body(status, failing_test, got, error, stderr)
    return f"\n{FEEDBACK}{body}\n{REVISE}{prefix}"


# rubber_duck: after a failed run the model explains before it revises.
EXPLAIN_CUE = "Explain the code line by line and why the failing test fails:"
# tdd: the model writes the tests first, from the statement alone.
TESTS_CUE = "Tests that pin the requested behaviour, one assert per line:"


def explain_text(**feedback: str) -> str:
    """Feedback after a failed run that asks for a prose explanation (ended by END)."""
    return f"\n{FEEDBACK}{feedback_body(**feedback)}\n{EXPLAIN_CUE}\n"


def tests_prompt(task: Task) -> str:
    """The first-turn prompt of a tdd episode: the statement, then the tests cue."""
    return f"{TASK}{task.prompt.strip()}\n{TESTS_CUE}\n"


def extract_asserts(text: str) -> str:
    """The assert statements of a model's tests (fenced or raw), one per line."""
    text = text.split(END, 1)[0]
    blocks = [b for b in _FENCE.findall(text) if b.strip()]
    source = "\n".join(blocks) if blocks else text
    lines = [line.strip() for line in source.splitlines()]
    return "".join(line + "\n" for line in lines if line.startswith("assert "))


_FENCE = re.compile(r"```[ \t]*(?:python|py|Python)?[ \t]*\n(.*?)(?:```|\Z)", re.S)


def extract_code(text: str, prefix: str = "") -> str:
    """Code from a model completion: the first fenced block with a def, else prefix + text.

    Raw text is cut at the end marker and trimmed to its longest prefix that parses, so
    a truncated trailing line does not turn an otherwise correct answer into a syntax
    error. Returns "" when nothing code-like is there (terminal reason no_code). `prefix`
    is the signature the prompt ended with (the completion continues it).
    """
    text = text.split(END, 1)[0]
    blocks = [b for b in _FENCE.findall(text) if b.strip()]
    if blocks:
        with_def = [b for b in blocks if "def " in b]
        return (with_def or blocks)[0].strip("\n") + "\n"
    if not text.strip():
        return ""
    lines = (prefix + text).strip("\n").splitlines()
    if not lines:
        return ""
    for cut in range(len(lines), 0, -1):
        cand = "\n".join(lines[:cut]).rstrip() + "\n"
        try:
            ast.parse(cand)
        except SyntaxError:
            continue
        return cand if cand.strip() else ""
    return "\n".join(lines).rstrip() + "\n"  # not parseable at all: the sandbox says why
