"""The executor interface every stage calls (rollout, score, clean's verification, eval).

Backends (subprocess, local zygote, docker) implement `Executor`. Model code failing is
a *result* (an ExecResult with a status); the sandbox itself failing raises SandboxError,
and callers must never turn that into a reward of 0.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

STATUSES = (
    "passed",
    "failed",
    "syntax_error",
    "runtime_error",
    "timeout",
    "memory_limit",
    "output_limit",
    "crashed",
    "no_code",
)


class SandboxError(RuntimeError):
    """Our own infrastructure failed (not the model's code). Never scored as 0."""


@dataclass
class ExecJob:
    """One program to judge against its tests."""

    code: str
    tests: list[str]  # see codeloop.schema.Task for the test string formats
    setup_code: str = ""
    io_style: str = "function"  # "function" | "stdio"
    entry_point: str = ""
    timeout_s: float | None = None  # None: the executor's default


@dataclass
class TestResult:
    index: int
    passed: bool
    status: str  # passed | failed | runtime_error | timeout | ...
    test: str = ""  # the test source (safe: it is the parent's copy)
    got: str = ""  # repr of the value the code returned, where safe
    expected: str = ""
    error_type: str = ""
    message: str = ""
    # the decoded plain value of a one-hole test (None otherwise): what the program
    # returned for the call, for callers that need the value itself (test augmentation)
    value: Any = None


@dataclass
class ExecResult:
    status: str  # one of STATUSES
    tests_passed: int = 0
    tests_total: int = 0
    test_results: list[TestResult] = field(default_factory=list)
    stdout: str = ""
    stderr: str = ""
    failing_test: str = ""
    error_type: str = ""
    error_message: str = ""
    duration_ms: float = 0.0

    @property
    def passed(self) -> bool:
        return self.status == "passed"

    @property
    def pass_rate(self) -> float:
        return self.tests_passed / self.tests_total if self.tests_total else 0.0


class Executor(Protocol):
    def run(self, job: ExecJob) -> ExecResult: ...

    def run_many(self, jobs: list[ExecJob]) -> list[ExecResult]:
        """Judge many jobs in parallel; results in input order."""
        ...

    def run_commands(self, jobs: list[CmdJob]) -> list[CmdResult]:
        """Run commands in workspaces, batched over the workers; results in input order."""
        ...

    def close(self) -> None: ...


# workspace_error: the workspace the episode's commands left could not be handed to the
# command (it did not run) or back after it; the command's result, never a sandbox fault
CMD_STATUSES = ("exited", "killed", "timeout", "output_limit", "memory_limit", "workspace_error")


@dataclass
class CmdJob:
    """One command in an agent's workspace (``cwd_host``: a dir inside a workspace the
    executor handed out, see codeloop.sandbox.cmdjobs). Runs sealed like every job."""

    argv: list[str]
    cwd_host: str
    timeout_s: float | None = None  # None: the executor's default
    env: dict[str, str] = field(default_factory=dict)  # on top of the scrubbed environment
    memory_mb: int | None = None  # None: the executor's default
    output_cap: int = 1 << 20  # bytes of stdout (and of stderr) kept; more kills the command
    result_cap: int = 4 << 20  # bytes of the result pipe (fd 3) kept
    # the task environment the command runs in, as the sandbox names it (an image's env dir,
    # cmdjobs.image_env): docker runs it in that environment's image; '' the executor's own
    image_env: str = ""


@dataclass
class CmdResult:
    """What a command did. A command failing is a result; the sandbox failing raises."""

    exit_code: int | None
    signal: int | None
    timed_out: bool
    stdout: str
    stderr: str
    duration_ms: float
    status: str  # one of CMD_STATUSES
    results: str = ""  # what the command wrote on fd 3 (untrusted, like all its output)
