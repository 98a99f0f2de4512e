"""params.yaml's rollout sections: sampling and episode modes (rollout), the coding
agent's environment (agent), the executor (sandbox) and the fan-out (runner).

Config imports nothing of the domain; codeloop.config re-exports every name.
"""

from __future__ import annotations

from typing import Literal, get_args

from pydantic import Field, field_validator

from codeloop.config.section import Section

# what sandbox.require can name (codeloop.sandbox.isolation.PROPERTIES says what each means);
# the default asks all but the optional ones (isolation.OPTIONAL: the host decides those)
SealProperty = Literal["pid_ns", "net_ns", "ipc_ns", "mount_ns", "private_root",
                       "read_only_root", "caps_dropped", "no_new_privs", "seccomp", "rlimits",
                       "not_host_root", "job_memory_cgroup"]
OPTIONAL_SEAL = ("job_memory_cgroup",)


class SandboxConfig(Section):
    backend: Literal["subprocess", "local", "docker"] = Field(
        "local", description="Executor backend: local (zygote), docker, or plain subprocess."
    )
    timeout_s: float = Field(
        5.0,
        gt=0,
        le=600,
        description="Time budget per run (s): CPU seconds, and wall time not spent waiting for a"
        " CPU; hard wall cap 10x + 1 s.",
    )
    memory_mb: int = Field(
        512,
        ge=32,
        description="Memory budget per run (MiB): address space per process and, where a"
        " memory cgroup can be made (job_memory_cgroup), all processes of the run together.",
    )
    workers: int = Field(0, ge=0, le=256, description="Parallel workers; 0 = one per core.")
    max_output_bytes: int = Field(65536, ge=1024, description="Cap on captured stdout/stderr.")
    require: list[SealProperty] = Field(
        default_factory=lambda: [p for p in get_args(SealProperty) if p not in OPTIONAL_SEAL],
        description="Isolation the sandbox must really have (probed at start), else preflight,"
        " exec and the local/docker backends refuse it: pid_ns, net_ns, ipc_ns, mount_ns,"
        " private_root, read_only_root, caps_dropped, no_new_privs, seccomp, rlimits,"
        " not_host_root, job_memory_cgroup. Default: all but job_memory_cgroup (the full"
        " seal; a per-job memory cgroup needs root or a delegated cgroup).",
    )
    ro_binds: list[str] = Field(
        default_factory=list,
        description="Host dirs (absolute) mounted read-only at the same path in the sandbox's"
        " private root (a task environment); nothing else of the host is visible.",
    )

    @field_validator("ro_binds")
    @classmethod
    def _absolute_binds(cls, v: list[str]) -> list[str]:
        for path in v:
            if not path.startswith("/") or path.rstrip("/") == "" or ".." in path.split("/"):
                raise ValueError(f"ro_binds entry {path!r}: must be an absolute path below /")
        return v


class RolloutConfig(Section):
    samples_per_task: int = Field(4, ge=1, le=256, description="Completions per task (GRPO group).")
    max_steps: int = Field(1, ge=1, le=20, description="Generate + revise turns per episode.")
    temperature: float = Field(1.0, gt=0, le=5, description="Sampling temperature.")
    top_p: float = Field(0.95, gt=0, le=1, description="Nucleus sampling mass.")
    repetition_penalty: float = Field(1.0, ge=1, le=5, description="HF repetition penalty.")
    max_new_tokens: int = Field(64, ge=1, le=8192, description="Tokens per generation.")
    agent_max_new_tokens: int = Field(
        96, ge=1, le=8192, description="Tokens per tool call of an agent (repo task) turn."
    )
    batch_size: int = Field(64, ge=1, description="Sequences per generate() call.")
    seed: int = Field(0, description="Sampling seed.")
    iteration: int = Field(0, ge=0, description="Iteration number stamped into trajectories.")
    resume: bool = Field(True, description="Keep finished groups: a killed rollout resumes.")
    resume_shard_tasks: int = Field(16, ge=1, description="Tasks per rollout resume shard.")
    mode: Literal["self_debug", "rubber_duck", "tdd"] = Field(
        "self_debug",
        description="Function-task episodes: self_debug (code, run, read the error, revise),"
        " rubber_duck (after a failed run the model first explains the code and the failure in"
        " prose, then revises), tdd (the model first writes asserts for the statement, judged"
        " against the reference and wrong variants, then the code).",
    )
    agent_mode: Literal["self_debug", "rubber_duck", "tdd"] = Field(
        "self_debug",
        description="Repository-task episodes: self_debug (tool calls only), rubber_duck"
        " (after a failing run_tests the model explains the failure in prose before its next"
        " call) or tdd (the model is asked to write a test file first, judged on the reference"
        " and the buggy tree, then to fix).",
    )
    async_turns: bool = Field(
        True,
        description="With an engine (policy.engine: vllm): each episode's next turn is "
        "submitted as soon as its observation is back, not in lock-step with the slowest "
        "episode of the turn. Ignored with hf (lock-step batches).",
    )


class AgentConfig(Section):
    """The coding agent's environment (repository tasks; codeloop.agent)."""

    observation_chars: int = Field(
        1500, ge=200, le=200_000,
        description="Budget of one observation (chars); longer output is cut with a marker.",
    )
    max_steps: int = Field(
        8, ge=1, le=500, description="Tool calls per episode before it ends (max_steps)."
    )
    bash: bool = Field(
        False, description="Offer the bash tool (same seal; off by default: file tools suffice)."
    )
    command_timeout_s: float = Field(
        10.0, gt=0, le=600, description="Time budget of one bash or search command (s)."
    )
    test_timeout_s: float = Field(
        60.0, gt=0, le=1800, description="Time budget of one run_tests call (s)."
    )
    invalid_call_limit: int = Field(
        5, ge=1, le=500,
        description="Failed calls (malformed, unknown tool, bad args, errors) that end the"
        " episode (invalid_action_limit).",
    )
    max_file_bytes: int = Field(
        1_000_000, ge=1024, description="Largest file read_file reads or write_file writes."
    )
    workspace_dir: str = Field(
        "",
        description="Host dir the episodes' workspaces go in; '' = /dev/shm where it is a"
        " tmpfs, else the temp dir. Point it at a sized tmpfs to cap their disk use.",
    )
    max_patch_bytes: int = Field(
        1_000_000, ge=1024,
        description="Largest model patch the judge reads (UTF-8 bytes); a larger one is that"
        " row's verdict (status patch_too_large, not resolved), refused before parsing.",
    )
    workspace_bytes: int = Field(
        256 * 2**20, ge=2**20,
        description="Disk one workspace (an episode's or a judged tree) may fill, on a tmpfs"
        " of that size: a write past it fails with ENOSPC inside the sandbox.",
    )
    envs_dir: str = Field(
        "data/clean/envs",
        description="Test environment dirs (pytest and each repository's deps), mounted"
        " read-only at /envs in the sandbox.",
    )


class RunnerConfig(Section):
    kind: Literal["threads", "dask", "ray"] = Field("threads", description="Fan-out engine.")
    address: str = Field(
        "", description="Dask scheduler / Ray cluster, used as is; empty = a local one per call."
    )
    workers: int = Field(
        2, ge=1,
        description="Threads, LocalCluster processes or local Ray CPUs; also the chunk count.",
    )
