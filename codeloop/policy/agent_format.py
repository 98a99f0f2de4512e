"""Agent action format: one tool call per model turn, rendered, parsed and tokenised.

The tool JSON schemas of the eight tools (``schema.TOOLS``) live here, in one place:
chat models get them through ``apply_chat_template(..., tools=TOOL_SCHEMAS)``, the
compact grammar coerces argument types with them.

Compact grammar (the embedded model; ``AGENT_COMPACT_VERSION``). An episode is one
growing text; the model writes one call after each ``<|tool|>`` and stops at ``<|end|>``:

    <|task|>{problem statement}
    <|tool|>run_tests<|end|>
    <|obs|>{observation}
    <|tool|>read_file path=pkg/a.py<|end|>
    <|obs|>{observation}
    <|tool|>edit path=pkg/a.py
    <<<old
        return a - b
    <<<new
        return a + b<|end|>
    <|obs|>...

A call is its tool name, then ``key=value`` pairs on the same line (a value without
spaces or quotes is written bare, anything else as JSON: ``pattern="def f"``,
``selection=["tests/test_a.py::test_x"]``), then block arguments: a line ``<<<key``
followed by the value verbatim up to the next block line or the end of the call.
``old``/``new``/``content``/``command`` are always blocks (code is easier to copy than
to escape); a block value that itself holds a ``\\n<<<word\\n`` line is written inline
as JSON instead, so ``parse_compact(render_compact(call)) == call`` for every call.
Integers and arrays are coerced by the tool's schema. A text that does not parse (no
tool name, a bad value, a generation cut by the length cap) is ``AgentParseError``: the
rollout turns it into an observation (error kind ``parse_error``), never a crash.

Chat models (``ChatAgentFormat``): the tokenizer's own chat template with the tool
schemas, the model's own tool-call syntax (Qwen2.5: ``<tool_call>{json}</tool_call>``;
Llama 3: a bare JSON object), tool results as the template's ``tool`` role. The reply SFT
trains on is rendered by the template from an assistant message with ``tool_calls``.

Token layout as for function episodes: only model-generated ids carry loss; every id
is built piece by piece (prompt, then each call's and observation's delta), never by
re-tokenising the whole text.
"""

from __future__ import annotations

import json
import re
from typing import Any

from codeloop.agent.model_tests import MODEL_TEST_PATH
from codeloop.policy import prompts as P
from codeloop.policy.formats import ChatFormat, CompactFormat
from codeloop.schema import TOOLS, Action, Observation, Task, by_kind

AGENT_COMPACT_VERSION = "agent-v1"
AGENT_CHAT_VERSION = "agent-chat-v1"

AGENT_SYSTEM = (
    "You are a coding agent working in a Python repository. Fix the problem described by "
    "the user. Call exactly one tool per turn; read the tool's result before the next call. "
    "Run the tests before you submit."
)

BLOCK_ARGS = ("old", "new", "content", "command")


def _fn(name: str, desc: str, props: dict[str, tuple[str, str]], required: list[str]) -> dict:
    schema_props = {}
    for key, (typ, about) in props.items():
        prop: dict[str, Any] = {"type": typ, "description": about}
        if typ == "array":
            prop["items"] = {"type": "string"}
        schema_props[key] = prop
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": desc,
            "parameters": {"type": "object", "properties": schema_props, "required": required},
        },
    }


TOOL_SCHEMAS: list[dict] = [
    _fn(
        "list_files",
        "List files and directories of the workspace.",
        {
            "path": ("string", "Directory relative to the repository root (default '.')."),
            "depth": ("integer", "How many directory levels to descend."),
        },
        [],
    ),
    _fn(
        "read_file",
        "Read a file, optionally a 1-based line range.",
        {
            "path": ("string", "File relative to the repository root."),
            "start": ("integer", "First line to show (1-based)."),
            "end": ("integer", "Last line to show (inclusive)."),
        },
        ["path"],
    ),
    _fn(
        "search",
        "Regex search over the workspace's files; prints path:line: text per match.",
        {
            "pattern": ("string", "A Python regular expression."),
            "path": ("string", "Directory or file to search (default '.')."),
        },
        ["pattern"],
    ),
    _fn(
        "edit",
        "Replace the one exact occurrence of `old` in a file by `new`.",
        {
            "path": ("string", "File relative to the repository root."),
            "old": ("string", "Exact text to replace; must occur exactly once."),
            "new": ("string", "Replacement text."),
        },
        ["path", "old", "new"],
    ),
    _fn(
        "write_file",
        "Create or overwrite a file with the given content.",
        {
            "path": ("string", "File relative to the repository root."),
            "content": ("string", "The whole new content of the file."),
        },
        ["path", "content"],
    ),
    _fn(
        "run_tests",
        "Run the visible tests (or the given pytest node ids); shows pass/fail per test.",
        {"selection": ("array", "pytest node ids; omit to run every visible test.")},
        [],
    ),
    _fn(
        "bash",
        "Run a shell command in the workspace (only when enabled).",
        {"command": ("string", "The command line.")},
        ["command"],
    ),
    _fn("submit", "Finish the episode; the current workspace is the answer.", {}, []),
]
_PROPS = {s["function"]["name"]: s["function"]["parameters"]["properties"] for s in TOOL_SCHEMAS}
assert tuple(_PROPS) == TOOLS, "TOOL_SCHEMAS must cover schema.TOOLS in order"


# rubber_duck: what the model is asked after a failing run_tests; a chat model is also told
# to write prose (CHAT_PROSE_ONLY) and, after its explanation, to call a tool again.
EXPLAIN_FAILURE = "Explain why the failing tests fail and which line is wrong:"
CHAT_PROSE_ONLY = "Prose only, no tool call."
CHAT_NEXT_CALL = "Now make your next tool call."
# tdd: the ask for a test file first.
TDD_ASK = (f"First write a test ({MODEL_TEST_PATH}, write_file) that fails now and passes once"
           " the bug is fixed, then fix the code and submit.")


class AgentParseError(ValueError):
    """The model's turn is not a well-formed tool call (an observation, not a crash)."""


def call_of(tool: str, **args: Any) -> dict:
    """A tool call as the environment takes it: {"tool": name, "args": {...}}."""
    return {"tool": tool, "args": dict(args)}


_BARE = re.compile(r'[^\s"\[{][^\s]*')
_BLOCK_LINE = re.compile(r"\n<<<([A-Za-z_]\w*)\n")
_NAME = re.compile(r"[A-Za-z_]\w*")


def _inline(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, int | str):
        return json.dumps(value)
    if isinstance(value, int):
        return str(value)
    return value if _BARE.fullmatch(value) else json.dumps(value)


def render_compact(call: dict) -> str:
    """The compact text of a call (without the end marker); see the module docstring."""
    tool, args = call["tool"], dict(call.get("args") or {})
    if not _NAME.fullmatch(tool):
        raise ValueError(f"tool name {tool!r} is not an identifier")
    head, blocks = [tool], []
    for key, value in args.items():
        if not _NAME.fullmatch(key):
            raise ValueError(f"argument name {key!r} is not an identifier")
        text = f"\n<<<{key}\n{value}" if isinstance(value, str) else ""
        if key in BLOCK_ARGS and text and not _BLOCK_LINE.search(text[1:] + "\n"):
            blocks.append(text)
        else:
            head.append(f"{key}={_inline(value)}")
    return " ".join(head) + "".join(blocks)


def _coerce(tool: str, key: str, value: Any, raw: str) -> Any:
    typ = _PROPS.get(tool, {}).get(key, {}).get("type")
    if typ == "integer":
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, str) and re.fullmatch(r"-?\d+", value):
            return int(value)
        raise AgentParseError(f"{tool}: argument {key} must be an integer, got {raw!r}")
    if typ == "array" and isinstance(value, str):
        return [value]
    return value


def _head_args(tool: str, rest: str) -> dict[str, Any]:
    args: dict[str, Any] = {}
    dec = json.JSONDecoder()
    pos = 0
    while pos < len(rest):
        if rest[pos].isspace():
            pos += 1
            continue
        m = re.compile(r"([A-Za-z_]\w*)=").match(rest, pos)
        if not m:
            raise AgentParseError(f"{tool}: expected key=value at {rest[pos : pos + 20]!r}")
        key, pos = m.group(1), m.end()
        if pos < len(rest) and rest[pos] in '"[{':
            try:
                value, pos = dec.raw_decode(rest, pos)
            except json.JSONDecodeError as exc:
                raise AgentParseError(f"{tool}: argument {key}: bad JSON value ({exc})") from None
        else:
            end = pos
            while end < len(rest) and not rest[end].isspace():
                end += 1
            value, pos = rest[pos:end], end
            if not value:
                raise AgentParseError(f"{tool}: argument {key} has no value")
        args[key] = _coerce(tool, key, value, str(value))
    return args


def parse_compact(text: str) -> dict:
    """The call in a compact turn (text up to the end marker); AgentParseError if none."""
    text = text.split(P.END, 1)[0]
    parts = _BLOCK_LINE.split("\n" + text if text.startswith("<<<") else text)
    head = parts[0].strip()
    if not head:
        raise AgentParseError("empty turn: expected a tool call such as `run_tests`")
    tool, _, rest = head.partition(" ")
    if not _NAME.fullmatch(tool):
        raise AgentParseError(f"{tool[:40]!r} is not a tool name")
    if "\n" in rest:
        raise AgentParseError(f"{tool}: arguments after the first line must be <<<key blocks")
    args = _head_args(tool, rest)
    for key, value in zip(parts[1::2], parts[2::2], strict=True):
        if key in args:
            raise AgentParseError(f"{tool}: argument {key} given twice")
        args[key] = _coerce(tool, key, value, value[:40])
    return {"tool": tool, "args": args}


def observation_text(obs: Observation) -> str:
    """What the model reads of an observation: the output, its error kind up front."""
    out = obs.output
    if obs.error_kind and not out.startswith("error"):
        out = f"error: {obs.error_kind}: {out}" if out else f"error: {obs.error_kind}"
    return out


class CompactAgentFormat(CompactFormat):
    """The embedded model's agent grammar: <|task|>, then <|tool|> call <|end|> <|obs|> ..."""

    kind = "compact"
    version = AGENT_COMPACT_VERSION

    def prompt(self, task: Task) -> str:
        return f"{P.TASK}{task.prompt.strip()}\n{P.TOOL}"

    def tdd_prompt(self, task: Task) -> str:
        return f"{P.TASK}{task.prompt.strip()}\n{TDD_ASK}\n{P.TOOL}"

    def call_text(self, call: dict) -> str:
        return render_compact(call) + P.END

    def call_ids(self, task: Task, call: dict) -> list[int]:
        """The ids a model emits for `call` (SFT's completion; ends with the stop token)."""
        return self.encode(self.call_text(call))

    def observation_ids(self, task: Task, obs: Observation, stopped: bool = True) -> list[int]:
        """Ids after a call: the observation and the next turn's <|tool|> marker."""
        return self.encode(f"\n{P.OBS}{observation_text(obs)}\n{P.TOOL}")

    # rubber_duck: a failing run_tests is followed by a prose explanation, then the call.
    def explain_observation_ids(self, task: Task, obs: Observation) -> list[int]:
        return self.encode(f"\n{P.OBS}{observation_text(obs)}\n{EXPLAIN_FAILURE}\n")

    def next_call_ids(self, task: Task, stopped: bool = True) -> list[int]:
        return self.encode(f"\n{P.TOOL}")

    def parse(self, text: str) -> dict:
        return parse_compact(text)


_TOOL_CALL = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|\Z)", re.S)


def parse_chat(text: str) -> dict:
    """The first tool call of a chat reply: a <tool_call> JSON, else the first JSON
    object with a name; ``arguments`` (or ``parameters``) may be a JSON string."""
    dec = json.JSONDecoder()
    cands = [m.group(1) for m in _TOOL_CALL.finditer(text)]
    cands += [text[i:] for i, ch in enumerate(text) if ch == "{"]
    for cand in cands:
        try:
            obj, _ = dec.raw_decode(cand.lstrip())
        except json.JSONDecodeError:
            continue
        if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
            continue
        args = obj.get("arguments", obj.get("parameters", {}))
        if isinstance(args, str):
            try:
                args = json.loads(args) if args.strip() else {}
            except json.JSONDecodeError:
                raise AgentParseError(f"{obj['name']}: arguments are not JSON") from None
        if not isinstance(args, dict):
            raise AgentParseError(f"{obj['name']}: arguments must be a JSON object")
        tool = obj["name"]
        return {"tool": tool, "args": {k: _coerce(tool, k, v, str(v)) for k, v in args.items()}}
    raise AgentParseError("no tool call found: reply with one <tool_call>{json}</tool_call>")


class ChatAgentFormat(ChatFormat):
    """A chat model's own template: agent system prompt, the task, tool calls, tool results."""

    version = AGENT_CHAT_VERSION

    def __init__(self, tokenizer):
        super().__init__(tokenizer, tools=TOOL_SCHEMAS)

    def messages(self, task: Task) -> list[dict]:
        return [
            {"role": "system", "content": AGENT_SYSTEM},
            {"role": "user", "content": task.prompt.strip()},
        ]

    def tdd_prompt(self, task: Task) -> str:
        msgs = self.messages(task)
        msgs[-1] = {**msgs[-1], "content": msgs[-1]["content"] + "\n\n" + TDD_ASK}
        return self._render(msgs, generation_prompt=True)

    def call_text(self, call: dict, task: Task | None = None) -> str:
        """The template's rendering of an assistant turn that makes `call`, with its end."""
        msgs = self.messages(task) if task else self.messages(Task("t", "agent", "fix it"))
        prefix = self._render(msgs, generation_prompt=True)
        fn = {"name": call["tool"], "arguments": dict(call.get("args") or {})}
        turn = {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"type": "function", "function": fn}],
        }
        full = self._render(msgs + [turn], generation_prompt=False)
        if not full.startswith(prefix):
            raise ValueError("chat template: an assistant tool call does not extend the prompt")
        reply = full[len(prefix) :]
        ends = [(reply.find(n), n) for n in self._end_names() if reply.find(n) >= 0]
        if not ends:
            raise ValueError("chat template: no end-of-turn token after a tool call")
        at, name = min(ends)
        return reply[: at + len(name)]

    def call_ids(self, task: Task, call: dict) -> list[int]:
        return self.encode(self.call_text(call, task))

    def observation_ids(self, task: Task, obs: Observation, stopped: bool = True) -> list[int]:
        return self.tool_result_ids(task, observation_text(obs), stopped=stopped)

    def explain_observation_ids(self, task: Task, obs: Observation) -> list[int]:
        text = f"{observation_text(obs)}\n\n{EXPLAIN_FAILURE} {CHAT_PROSE_ONLY}"
        return self.tool_result_ids(task, text, stopped=True)

    def next_call_ids(self, task: Task, stopped: bool = True) -> list[int]:
        return self._user_turn(task, CHAT_NEXT_CALL, stopped)

    def parse(self, text: str) -> dict:
        return parse_chat(text)


def call_message(a: Action) -> dict:
    """The assistant message of one tool turn: a ``tool_calls`` entry (arguments as an
    object, as chat templates take them) when the call parsed, else the model's raw text."""
    if not a.tool:
        return {"role": "assistant", "content": a.raw or a.content}
    try:
        args = json.loads(a.args or "{}")
    except json.JSONDecodeError as exc:
        msg = f"action {a.step}: field args is not JSON ({exc}): {a.args[:60]!r}"
        raise ValueError(msg) from None
    if not isinstance(args, dict):
        raise ValueError(f"action {a.step}: field args is not a JSON object: {a.args[:60]!r}")
    fn = {"name": a.tool, "arguments": args}
    return {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"type": "function", "function": fn}],
    }


def episode_messages(task: Task, turns: list[Action], mode: str = "") -> list[dict]:
    """An agent episode as the chat messages ``ChatAgentFormat`` shows and reads: the system
    prompt and the task (with the tdd ask in mode "tdd"), then each model turn (a tool call,
    or a rubber_duck explanation) and between two turns what the model read: the tool's
    observation (with the explain ask before an explanation), the next-call ask after one.
    ``turns`` are the model's actions (``schema.model_turns``); the observation after the
    last turn is left out: the episode ended, the model never read it."""
    user = task.prompt.strip() + (f"\n\n{TDD_ASK}" if mode == "tdd" else "")
    msgs: list[dict] = [
        {"role": "system", "content": AGENT_SYSTEM},
        {"role": "user", "content": user},
    ]
    for k, a in enumerate(turns):
        last = k == len(turns) - 1
        if a.action_type == "explain":
            msgs.append({"role": "assistant", "content": a.content})
            msgs += [] if last else [{"role": "user", "content": CHAT_NEXT_CALL}]
            continue
        if a.action_type != "tool":
            raise ValueError(
                f"action {a.step}: field action_type {a.action_type!r} in an agent "
                "episode; allowed: tool, explain"
            )
        msgs.append(call_message(a))
        if last:
            continue
        text = observation_text(a.observation)
        if turns[k + 1].action_type == "explain":
            text = f"{text}\n\n{EXPLAIN_FAILURE} {CHAT_PROSE_ONLY}"
        msgs.append({"role": "tool", "name": a.tool, "content": text})
    return msgs


def agent_format_for(tokenizer):
    """The agent format of a tokenizer: chat when it has a chat template and no compact
    markers, else the compact grammar (markers as text where they are no special tokens)."""
    from codeloop.policy.formats import format_for

    base = format_for(tokenizer)
    if isinstance(base, ChatFormat):
        return ChatAgentFormat(tokenizer)
    return CompactAgentFormat(tokenizer)


def repo_corpus(tasks: list[Task], repos_dir) -> list[str]:
    """Texts an embedded tokenizer should see for repository tasks: every file of each
    distinct snapshot once but the hidden test files of any of its tasks (what the model
    never sees, its tokenizer is not fitted to either), and each task's expert calls in
    the compact grammar (so paths, code and the call syntax get merges, not bytes)."""
    from pathlib import Path

    from codeloop.agent.workspace import hidden_files
    from codeloop.data.repos.expert import expert_calls
    from codeloop.data.repos.store import snapshot_path

    repo_tasks = by_kind(tasks)["repo"]
    hidden: dict[str, set[str]] = {}
    for t in repo_tasks:
        hidden.setdefault(t.snapshot, set()).update(hidden_files(t))
    docs: list[str] = []
    seen: set[str] = set()
    for t in repo_tasks:
        if t.snapshot not in seen:
            seen.add(t.snapshot)
            root = snapshot_path(repos_dir, t.snapshot)
            for f in sorted(Path(root).rglob("*")):
                if str(f.relative_to(root)) in hidden[t.snapshot]:
                    continue
                if f.is_file() and f.suffix in (".py", ".md", ".txt", ".cfg", ".toml"):
                    docs.append(f"{f.relative_to(root)}\n{f.read_text(errors='replace')}")
        calls = expert_calls(t, repos_dir)
        docs.append("".join(f"{P.TOOL}{render_compact(c)}{P.END}\n{P.OBS}" for c in calls))
    return docs
