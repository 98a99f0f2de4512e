"""The agent's action space (``schema.TOOLS``) over one workspace.

Each call is planned into either an answer now (file tools: host side, through fsops,
which never follows a link) or a sandbox command plus a function turning its result into
the answer (search, run_tests, bash), so an episode batch sends all its commands to the
sandbox at once (``AgentEnv.step_many``). Every failure of the agent's making is a
``ToolResult`` with an ``error_kind``, never an exception; every output is cut to the
observation budget with a marker saying so: read_file and search cut whole lines and say
which lines they left out and how to see them (a range, a narrower search).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from difflib import SequenceMatcher

from codeloop.agent.fsops import ToolError, list_tree, read_bytes, split_path, write_bytes
from codeloop.agent.lines import fit_lines, numbered
from codeloop.agent.testrun import (
    TestReport,
    report_of,
    sealed_report,
    sealed_test_job,
    test_job,
)
from codeloop.agent.workspace import node_file
from codeloop.config import AgentConfig
from codeloop.sandbox.base import CmdJob, CmdResult
from codeloop.schema import TOOLS, Task

# argument name -> (accepted types, required)
ARGS: dict[str, dict[str, tuple[tuple[type, ...], bool]]] = {
    "list_files": {"path": ((str,), False), "depth": ((int,), False)},
    "read_file": {"path": ((str,), True), "start": ((int,), False), "end": ((int,), False)},
    "search": {"pattern": ((str,), True), "path": ((str,), False)},
    "edit": {"path": ((str,), True), "old": ((str,), True), "new": ((str,), True)},
    "write_file": {"path": ((str,), True), "content": ((str,), True)},
    "run_tests": {"selection": ((list, str, type(None)), False)},
    "bash": {"command": ((str,), True)},
    "submit": {},
}
# calls the agent got wrong in form (these count towards agent.invalid_call_limit)
INVALID_KINDS = frozenset({"parse_error", "unknown_tool", "bad_args", "outside_workspace",
                           "disabled", "symlink", "episode_over"})
MAX_DEPTH = 8
HINT_LINES = 12  # most lines of a failed edit's closest window shown
HINT_SCAN_LINES, HINT_LINE_CHARS, HINT_CANDIDATES = 5000, 200, 16  # its bounded search (why: there)


@dataclass
class ToolResult:
    output: str
    error_kind: str = ""
    truncated: bool = False
    done: bool = False  # submit
    report: TestReport | None = None  # run_tests
    visible_passed: int = -1  # run_tests: visible tests that passed in this run


@dataclass
class Pending:
    """A call waiting on one sandbox command."""

    job: CmdJob
    finish: Callable[[CmdResult], ToolResult]


def parse_call(call: object) -> tuple[str, dict, str]:
    """(tool, args, problem) of a call: a dict ``{"tool", "args"}``, its JSON text, or
    ``{"parse_error": why}`` from the model-output parser. ``problem`` is '' when sound."""
    if isinstance(call, str):
        try:
            call = json.loads(call)
        except ValueError as e:
            return "", {}, f"parse_error: not a JSON tool call ({e})"
    if not isinstance(call, dict):
        return "", {}, "parse_error: a tool call is a JSON object"
    if "parse_error" in call:
        return str(call.get("tool", "")), {}, f"parse_error: {call['parse_error']}"
    tool, args = call.get("tool"), call.get("args", {})
    if not isinstance(tool, str) or not tool:
        return "", {}, "parse_error: the call names no tool"
    if not isinstance(args, dict):
        return tool, {}, "bad_args: args must be a JSON object"
    if tool not in TOOLS:
        return tool, args, f"unknown_tool: {tool!r}; tools are {', '.join(TOOLS)}"
    spec = ARGS[tool]
    for name, value in args.items():
        if name not in spec:
            return tool, args, f"bad_args: {tool} takes no argument {name!r} (takes {sorted(spec)})"
        if not isinstance(value, spec[name][0]) or isinstance(value, bool):
            return tool, args, f"bad_args: {tool}.{name} has the wrong type"
    missing = [n for n, (_, req) in spec.items() if req and n not in args]
    if missing:
        return tool, args, f"bad_args: {tool} needs {', '.join(missing)}"
    return tool, args, ""


class Tools:
    """The tools of one episode: ``plan(tool, args)`` -> ToolResult or Pending."""

    def __init__(self, ws_path: str, task: Task, cfg: AgentConfig, env_inside: list[str],
                 base: str = "", boot: str = ""):
        self.root, self.task, self.cfg, self.env_inside = ws_path, task, cfg, env_inside
        # base: the workspace's base tree; boot: the sealed pytest entry as the sandbox sees
        # it (both set: run_tests runs sealed, as the judge does)
        self.base, self.boot = base, boot

    def plan(self, tool: str, args: dict) -> ToolResult | Pending:
        try:
            return getattr(self, "_" + tool)(**args)
        except ToolError as e:
            return ToolResult(f"error: {e}", error_kind=e.kind)

    def _list_files(self, path: str = ".", depth: int = 2) -> ToolResult:
        entries = list_tree(self.root, path, max(1, min(depth, MAX_DEPTH)))
        return ToolResult("\n".join(entries) if entries else "(empty directory)")

    def _text(self, path: str) -> str:
        data = read_bytes(self.root, path, self.cfg.max_file_bytes)
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            raise ToolError("bad_args", f"{path}: not a UTF-8 text file") from None

    def _read_file(self, path: str, start: int = 1, end: int | None = None) -> ToolResult:
        lines = self._text(path).splitlines()
        first = max(start, 1)
        last = len(lines) if end is None else min(end, len(lines))
        if first > max(last, 1) or (lines and first > len(lines)):
            raise ToolError("bad_args", f"{path}: lines {start}-{end} outside 1-{len(lines)}")
        if not lines:
            return ToolResult("(empty file)")
        shown = numbered(lines, first, last)

        def note(a: int, b: int) -> str:
            lo, hi = first + a, first + b
            return (f"[... lines {lo}-{hi} omitted ({hi - lo + 1} lines of {len(lines)}); "
                    f"read_file with start/end to see them ...]")

        body, cut = fit_lines(shown, self.cfg.observation_chars, note)
        return ToolResult(body, truncated=cut)

    def _edit(self, path: str, old: str, new: str) -> ToolResult:
        if not old:
            raise ToolError("bad_args", "edit.old must not be empty (use write_file)")
        text = self._text(path)
        n = text.count(old)
        if n == 0:
            hint = closest_lines(text, old)
            raise ToolError("no_match", f"{path}: old text not found (it must match exactly)"
                            + (f"; the closest lines are\n{hint}" if hint else ""))
        if n > 1:
            raise ToolError("not_unique", f"{path}: old text found {n} times; add context")
        write_bytes(self.root, path, text.replace(old, new, 1).encode("utf-8"))
        line = text[: text.index(old)].count("\n") + 1
        return ToolResult(f"edited {path} at line {line}")

    def _write_file(self, path: str, content: str) -> ToolResult:
        data = content.encode("utf-8", "surrogatepass")
        if len(data) > self.cfg.max_file_bytes:
            raise ToolError("too_large", f"{len(data)} bytes, over {self.cfg.max_file_bytes}")
        write_bytes(self.root, path, data)
        return ToolResult(f"wrote {path} ({len(data)} bytes)")

    def _submit(self) -> ToolResult:
        return ToolResult("submitted", done=True)

    def _search(self, pattern: str, path: str = ".") -> Pending:
        rel = "/".join(split_path(path)) or "."
        argv = ["grep", "-rnIP", "--color=never", "-m", "200", "--exclude-dir=__pycache__",
                "--exclude-dir=.pytest_cache", "-e", pattern, "--", rel]
        job = CmdJob(argv, self.root, timeout_s=self.cfg.command_timeout_s)

        def finish(res: CmdResult) -> ToolResult:
            if res.status == "timeout":
                return ToolResult("error: search timed out", error_kind="timeout")
            if res.exit_code == 1:
                return ToolResult(f"no match for {pattern!r}")
            if res.exit_code != 0:
                return ToolResult(f"error: {res.stderr.strip()[:500]}", error_kind="bad_args")
            hits = res.stdout.rstrip("\n").split("\n")

            def note(a: int, b: int) -> str:
                return (f"[... {b - a + 1} of {len(hits)} matching lines omitted; narrow the "
                        f"pattern or the path ...]")

            text, cut = fit_lines(hits, self.cfg.observation_chars, note)
            return ToolResult(text, truncated=cut)

        return Pending(job, finish)

    def _bash(self, command: str) -> Pending | ToolResult:
        if not self.cfg.bash:
            raise ToolError("disabled", "bash is switched off here (agent.bash: false)")
        job = CmdJob(["/bin/sh", "-c", command], self.root, timeout_s=self.cfg.command_timeout_s)

        def finish(res: CmdResult) -> ToolResult:
            out = res.stdout + (("\n[stderr]\n" + res.stderr) if res.stderr else "")
            if res.status == "timeout":
                return ToolResult(out + f"\n[timed out after {job.timeout_s:g} s]", "timeout")
            tail = f"[exit {res.exit_code}]" if res.exit_code is not None else f"[{res.status}]"
            return ToolResult(f"{out}\n{tail}".lstrip("\n"))

        return Pending(job, finish)

    def _selection(self, selection: list | str | None) -> list[str]:
        if selection is None or selection == []:
            return list(self.task.visible_tests)
        ids = [selection] if isinstance(selection, str) else selection
        hidden = {node_file(n) for n in self.task.hidden_tests}
        for node in ids:
            if not isinstance(node, str) or not node or node.startswith("-"):
                raise ToolError("bad_args", f"run_tests: {node!r} is not a test node id")
            split_path(node_file(node))
            if node_file(node) in hidden:
                raise ToolError("bad_args", f"run_tests: {node} is not a visible test")
        return list(ids)

    def _run_tests(self, selection: list | str | None = None) -> Pending:
        ids = self._selection(selection)
        if not self.boot:
            job = test_job(self.root, ids, self.env_inside, self.cfg.test_timeout_s)
            return Pending(job, lambda res: self._test_result(report_of(res)))
        job, run = sealed_test_job(self.root, self.base, ids, self.boot, self.env_inside,
                                   self.cfg.test_timeout_s)
        return Pending(job, lambda res: self._test_result(sealed_report(res, run)))

    def _test_result(self, rep: TestReport) -> ToolResult:
        visible = set(self.task.visible_tests)
        passed = sum(1 for n, o in rep.outcomes.items() if o == "passed" and n in visible)
        lines = [f"{o.upper():8} {n}" for n, o in rep.outcomes.items()]
        counts = ", ".join(f"{rep.count(o)} {o}" for o in ("passed", "failed", "error")
                           if rep.count(o))
        head = f"{counts or 'no tests ran'}"
        tail = []
        if rep.first_failure:
            tail += ["--- first failure ---", rep.first_failure]
        if rep.status == "timeout":
            tail.append(f"[test run timed out after {self.cfg.test_timeout_s:g} s]")
        if not rep.collected_ok:
            tail += ["--- pytest output (tail) ---", rep.output_tail]
        if len("\n".join([head, *lines, *tail])) > self.cfg.observation_chars:
            # an output over the budget is cut in its middle, where a real suite's hundreds
            # of PASSED lines would bury the failing ones: list only the tests that did not pass
            lines = [x for x in lines if not x.startswith("PASSED ")]
            lines.append(f"[... {rep.count('passed')} passed tests not listed ...]")
        parts = [head, *lines, *tail]
        kind = "timeout" if rep.status == "timeout" else ""
        return ToolResult("\n".join(parts), error_kind=kind, report=rep, visible_passed=passed)


def closest_lines(text: str, old: str) -> str:
    """The window of ``text`` most like ``old`` (as many lines), numbered as read_file numbers.

    Why: a failed edit's error is where an agent learns to mend it. The tiny policy writes an
    edit's old text from memory (another repository's names) more often than it copies it,
    and right after a read it copies well; the window puts the true text one step back, as
    real harnesses' edit errors do. It shows only what read_file would, so it gives nothing
    away. Its cost is bounded whatever the file and the old text (they are the model's): a
    cheap per-line score picks a few starts, and only those windows get the full comparison.
    """
    lines = text.splitlines()
    want = old.strip("\n").splitlines()
    if not lines or not want:
        return ""
    k = min(len(want), len(lines), HINT_LINES)
    cut = [x[:HINT_LINE_CHARS] for x in lines[: HINT_SCAN_LINES + k]]
    target = "\n".join(x[:HINT_LINE_CHARS] for x in want[:k])
    head = SequenceMatcher(None, b=want[0][:HINT_LINE_CHARS], autojunk=False)

    def quick(i: int) -> float:
        head.set_seq1(cut[i])
        return head.quick_ratio()

    starts = sorted(range(len(cut) - k + 1), key=lambda i: (-quick(i), i))[:HINT_CANDIDATES]

    def full(i: int) -> tuple[float, int]:
        return SequenceMatcher(None, "\n".join(cut[i : i + k]), target, autojunk=False).ratio(), -i

    best = max(starts, key=full)
    return "\n".join(numbered(lines, best + 1, best + k))
