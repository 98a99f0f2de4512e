"""Prompt formats by model kind: what the policy is shown, where it stops, what code it wrote.

Three formats, picked from the tokenizer by `format_for` (one per policy):

- ``compact`` (the embedded model; ``prompts.PROMPT_TEMPLATE_VERSION``): the
  ``<|task|>``/``<|code|>``/``<|feedback|>``/``<|revise|>`` markers of
  `codeloop.policy.prompts`, unchanged.
- ``chat`` (a tokenizer with a ``chat_template``; ``CHAT_VERSION``): the template's own
  rendering of a system message, the task as the user message and each feedback as a
  further user message (tool results as the ``tool`` role, tool schemas through
  ``tools=``). Generation stops at the template's end-of-turn tokens. The code of a
  reply is its first ```python block (see `extract_fenced` for the fallbacks).
- ``base`` (no chat template; ``BASE_VERSION``): a completion prompt in Python comments
  ending with the function's signature; stops at EOS or at the start of a new task,
  feedback or test line (`BASE_STOPS`).

Every format builds token ids piece by piece (prompt, then each feedback's delta), so a
multi-turn episode's ids are exactly what the sampler saw; the chat deltas come from the
template itself (rendered around a sentinel reply), never from hand-written role tags.
"""

from __future__ import annotations

import ast
import re

from codeloop.policy import prompts as P
from codeloop.schema import Task

CHAT_VERSION = "chat-v1"
BASE_VERSION = "base-v1"

SYSTEM = (
    "You are an expert Python programmer. Reply with exactly one ```python code block "
    "that defines the requested function. No explanation."
)
FIX = "Fix the code. Reply with exactly one ```python code block."
EXPLAIN = (
    "Before you fix it, explain in prose what the code does line by line and why the "
    "failing test fails. No code."
)
TESTS = (
    "First write only the tests: one ```python block of assert statements that pin the "
    "requested behaviour. No implementation."
)
CODE_AFTER_TESTS = "Now write the function. Reply with exactly one ```python code block."
# End-of-turn tokens of common chat templates (ChatML, Llama 3, Gemma, Phi-3); only
# those the tokenizer has as single tokens count.
END_OF_TURN = (
    "<|im_end|>",
    "<|eot_id|>",
    "<|eom_id|>",
    "<end_of_turn>",
    "<|end|>",
    "<|endoftext|>",
    "<|end_of_text|>",
)
BASE_STOPS = ("\n# Task:", "\n# Feedback:", "\nassert ", "\nif __name__")
_SENTINEL = "\u2063CODELOOP-REPLY\u2063"

_TAGGED = re.compile(r"```[ \t]*(?:python|py|python3)[ \t]*\n(.*?)(?:```|\Z)", re.S | re.I)
_ANY = re.compile(r"```[^\n`]*\n(.*?)(?:```|\Z)", re.S)


def trim_to_parseable(text: str) -> str:
    """The longest line prefix of text that parses as Python ("" if none is code-like)."""
    lines = text.strip("\n").splitlines()
    for cut in range(len(lines), 0, -1):
        cand = "\n".join(lines[:cut]).rstrip() + "\n"
        try:
            ast.parse(cand)
        except SyntaxError:
            continue
        return cand if cand.strip() else ""
    return "\n".join(lines).rstrip() + "\n" if lines else ""


def extract_fenced(text: str) -> str:
    """Code of a chat reply: the first ```python block (closed or cut off by the length
    limit); else the first fenced block of any language; else the raw reply trimmed to
    its longest parseable prefix; "" when the reply is empty (terminal reason no_code)."""
    for pattern in (_TAGGED, _ANY):
        blocks = [b for b in pattern.findall(text) if b.strip()]
        if blocks:
            return blocks[0].strip("\n") + "\n"
    return trim_to_parseable(text) if text.strip() else ""


class CompactFormat:
    """The embedded model's marker format (prompts.py), byte for byte as before."""

    kind = "compact"
    version = P.PROMPT_TEMPLATE_VERSION

    def __init__(self, tokenizer):
        self.tok = tokenizer

    def encode(self, text: str) -> list[int]:
        return self.tok(text, add_special_tokens=False)["input_ids"]

    def prompt(self, task: Task) -> str:
        return P.task_prompt(task)

    def prompt_ids(self, task: Task) -> list[int]:
        return self.encode(self.prompt(task))

    def answer_ids(self, task: Task, code: str) -> list[int]:
        return self.encode(P.completion_text(code, P.signature(task)))

    def feedback_ids(self, task: Task, feedback: dict, stopped: bool = True) -> list[int]:
        return self.encode(P.feedback_text(**feedback, prefix=P.signature(task)))

    def extract(self, task: Task, text: str) -> str:
        return P.extract_code(text, prefix=P.signature(task))

    # Episode modes' extra turns (codeloop.rollout.function_env): rubber_duck explains a
    # failed run before its fix, tdd writes tests before its code.
    def explain_ids(self, task: Task, feedback: dict, stopped: bool = True) -> list[int]:
        return self.encode(P.explain_text(**feedback))

    def fix_ids(self, task: Task, stopped: bool = True) -> list[int]:
        return self.encode(f"\n{P.REVISE}{P.signature(task)}")

    def tests_prompt(self, task: Task) -> str:
        return P.tests_prompt(task)

    def code_ids(self, task: Task, stopped: bool = True) -> list[int]:
        return self.encode(f"\n{P.CODE}{P.signature(task)}")

    def extract_tests(self, task: Task, text: str) -> str:
        return P.extract_asserts(text)

    def tests_answer_ids(self, task: Task, asserts: str) -> list[int]:
        """The ids a model emits for its tests (SFT's completion of a tdd first turn)."""
        return self.encode(asserts.rstrip() + "\n" + P.END)

    def explanation_ids(self, task: Task, text: str) -> list[int]:
        """The ids a model emits for a prose explanation (SFT's rubber_duck turn)."""
        return self.encode(text.rstrip() + "\n" + P.END)

    def stop_ids(self) -> list[int]:
        ids = {self.tok.eos_token_id}
        end = self.encode(P.END)
        if len(end) == 1:
            ids.add(end[0])
        return sorted(i for i in ids if i is not None)

    def stop_strings(self) -> list[str]:
        return [] if len(self.encode(P.END)) == 1 else [P.END]


class BaseFormat(CompactFormat):
    """Completion-style prompts for base (non-chat) models: comments, then the signature."""

    kind = "base"
    version = BASE_VERSION

    def prompt(self, task: Task) -> str:
        lines = [f"# Task: {line}" for line in task.prompt.strip().splitlines()]
        tests = task.visible_tests[:1]
        if tests:
            lines += ["# Tests:"] + [f"# {t}" for t in tests]
        return "\n".join(lines) + "\n" + P.signature(task)

    def answer_ids(self, task: Task, code: str) -> list[int]:
        sig = P.signature(task)
        code = code.lstrip("\n")
        body = code[len(sig) :] if sig and code.startswith(sig) else code
        eos = self.tok.eos_token or ""
        return self.encode(body.rstrip() + "\n" + eos)

    def feedback_ids(self, task: Task, feedback: dict, stopped: bool = True) -> list[int]:
        body = P.feedback_text(**feedback).split(P.FEEDBACK, 1)[1].split(P.REVISE, 1)[0]
        lines = "".join(f"\n# Feedback: {line}" for line in body.strip().splitlines())
        return self.encode(lines + "\n# Revised solution:\n" + P.signature(task))

    def extract(self, task: Task, text: str) -> str:
        for stop in BASE_STOPS:
            text = text.split(stop, 1)[0]
        if "```" in text:
            return extract_fenced(text)
        return trim_to_parseable(P.signature(task) + text) if text.strip() else ""

    def stop_strings(self) -> list[str]:
        return list(BASE_STOPS)

    def explain_ids(self, task: Task, feedback: dict, stopped: bool = True) -> list[int]:
        lines = "".join(f"\n# Feedback: {line}" for line in P.feedback_body(**feedback).splitlines())
        return self.encode(f"{lines}\n# {P.EXPLAIN_CUE}\n# ")

    def fix_ids(self, task: Task, stopped: bool = True) -> list[int]:
        return self.encode("\n# Revised solution:\n" + P.signature(task))

    def tests_prompt(self, task: Task) -> str:
        # A base model stops at a new assert line: it writes one assert after the cue.
        lines = [f"# Task: {line}" for line in task.prompt.strip().splitlines()]
        return "\n".join(lines) + f"\n# {P.TESTS_CUE}\nassert "

    def code_ids(self, task: Task, stopped: bool = True) -> list[int]:
        return self.encode("\n# Solution:\n" + P.signature(task))

    def extract_tests(self, task: Task, text: str) -> str:
        return P.extract_asserts("assert " + text.split("\n", 1)[0])

    def tests_answer_ids(self, task: Task, asserts: str) -> list[int]:
        first = asserts.split("\n", 1)[0]
        return self.encode(first.removeprefix("assert ") + "\n" + (self.tok.eos_token or ""))

    def explanation_ids(self, task: Task, text: str) -> list[int]:
        return self.encode(text.rstrip() + "\n" + (self.tok.eos_token or ""))


class ChatFormat(CompactFormat):
    """The tokenizer's own chat template: system, task as user, feedback as user/tool turns."""

    kind = "chat"
    version = CHAT_VERSION

    def __init__(self, tokenizer, tools: list[dict] | None = None):
        super().__init__(tokenizer)
        self.tools = tools  # JSON schemas for agent tasks; None for plain code tasks

    def _render(self, messages: list[dict], generation_prompt: bool) -> str:
        return self.tok.apply_chat_template(
            messages,
            tools=self.tools,
            tokenize=False,
            add_generation_prompt=generation_prompt,
        )

    def messages(self, task: Task) -> list[dict]:
        user = task.prompt.strip()
        tests = task.visible_tests[:1]
        if tests:
            user += "\n\nTests:\n" + "\n".join(tests)
        sig = P.signature(task).strip()
        if sig:
            user += f"\n\nStart from: {sig}"
        return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]

    def prompt(self, task: Task) -> str:
        return self._render(self.messages(task), generation_prompt=True)

    def answer_ids(self, task: Task, code: str) -> list[int]:
        """The reply SFT trains on: the fenced code and the template's end of turn."""
        return self._reply_ids(task, f"```python\n{code.strip()}\n```")

    def feedback_ids(self, task: Task, feedback: dict, stopped: bool = True) -> list[int]:
        """Ids after a reply: end of turn (unless the reply already stopped on it), the
        feedback as the template's next user turn and the assistant's generation prompt."""
        body = P.feedback_text(**feedback).split(P.FEEDBACK, 1)[1].split(P.REVISE, 1)[0]
        tail = self._tail_after_reply(task, body.strip() + "\n\n" + FIX, role="user")
        return self.encode(self._strip_end(tail) if stopped else tail)

    def tool_result_ids(self, task: Task, content: str, stopped: bool = True) -> list[int]:
        """Ids of a tool result turn (role ``tool``) after a reply, for agent tasks."""
        tail = self._tail_after_reply(task, content, role="tool")
        return self.encode(self._strip_end(tail) if stopped else tail)

    def _tail_after_reply(self, task: Task, content: str, role: str) -> str:
        msgs = self.messages(task) + [
            {"role": "assistant", "content": _SENTINEL},
            {"role": role, "content": content},
        ]
        text = self._render(msgs, generation_prompt=True)
        if text.count(_SENTINEL) != 1:
            raise ValueError("chat template dropped or repeated the assistant reply")
        return text.split(_SENTINEL, 1)[1]

    def _reply_ids(self, task: Task, reply: str) -> list[int]:
        msgs = self.messages(task) + [{"role": "assistant", "content": _SENTINEL}]
        text = self._render(msgs, generation_prompt=False)
        after = text.split(_SENTINEL, 1)[1]
        end = self._end_text(after)
        return self.encode(reply + end)

    def _end_text(self, after: str) -> str:
        """The end-of-turn token string that opens `after` (what the model must emit)."""
        for name in self._end_names():
            if after.startswith(name):
                return name
        raise ValueError(
            f"chat template: the text after a reply ({after[:40]!r}) does not start with an "
            f"end-of-turn token of this tokenizer ({', '.join(self._end_names())})"
        )

    def _strip_end(self, tail: str) -> str:
        return tail[len(self._end_text(tail)) :]

    def _end_names(self) -> list[str]:
        return [self.tok.convert_ids_to_tokens(i) for i in self.stop_ids()]

    def extract(self, task: Task, text: str) -> str:
        return extract_fenced(text)

    def explain_ids(self, task: Task, feedback: dict, stopped: bool = True) -> list[int]:
        return self._user_turn(task, P.feedback_body(**feedback) + "\n\n" + EXPLAIN, stopped)

    def fix_ids(self, task: Task, stopped: bool = True) -> list[int]:
        return self._user_turn(task, FIX, stopped)

    def tests_prompt(self, task: Task) -> str:
        """The statement alone (no visible test: the model writes its own), then the ask."""
        system = self.messages(task)[0]
        user = {"role": "user", "content": task.prompt.strip() + "\n\n" + TESTS}
        return self._render([system, user], generation_prompt=True)

    def code_ids(self, task: Task, stopped: bool = True) -> list[int]:
        return self._user_turn(task, CODE_AFTER_TESTS, stopped)

    def extract_tests(self, task: Task, text: str) -> str:
        return P.extract_asserts(text)

    def tests_answer_ids(self, task: Task, asserts: str) -> list[int]:
        return self._reply_ids(task, f"```python\n{asserts.strip()}\n```")

    def explanation_ids(self, task: Task, text: str) -> list[int]:
        return self._reply_ids(task, text.strip())

    def _user_turn(self, task: Task, content: str, stopped: bool) -> list[int]:
        tail = self._tail_after_reply(task, content, role="user")
        return self.encode(self._strip_end(tail) if stopped else tail)

    def stop_ids(self) -> list[int]:
        ids = {self.tok.eos_token_id}
        vocab = self.tok.get_vocab()
        ids |= {vocab[name] for name in END_OF_TURN if name in vocab}
        return sorted(i for i in ids if i is not None)

    def stop_strings(self) -> list[str]:
        return []


def format_for(tokenizer, tools: list[dict] | None = None):
    """compact for the embedded tokenizer (markers are special tokens), chat when the
    tokenizer has a chat template, base otherwise."""
    specials = set(getattr(tokenizer, "all_special_tokens", []) or [])
    specials |= set(tokenizer.get_added_vocab()) if hasattr(tokenizer, "get_added_vocab") else set()
    if P.TASK in specials and P.CODE in specials:
        return CompactFormat(tokenizer)
    if getattr(tokenizer, "chat_template", None):
        return ChatFormat(tokenizer, tools)
    return BaseFormat(tokenizer)
