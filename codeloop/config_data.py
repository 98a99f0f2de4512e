"""The clean stage's section models (sources, the repository-task switch, thresholds), the
agent environment's (repository tasks), the archive's retention and the fan-out runner,
split from config_sections.py only for size; like it, this imports nothing of the domain.
codeloop.config re-exports them.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from codeloop.config_sections import _Section

# The names of codeloop.data.repos.mutate.OPERATORS and synth.REPAIRABLE: config imports
# nothing of the domain, so a test checks the lists agree.
MUTATION_OPERATORS = (
    "compare", "arith", "off_by_one", "constant", "condition", "swap_args", "drop_stmt",
    "wrong_return",
)


REPAIRABLE_OPERATORS = ("arith", "compare", "condition", "swap_args", "drop_stmt")


def _check_operators(v: list[str]) -> list[str]:
    unknown = sorted(set(v) - set(MUTATION_OPERATORS))
    if unknown:
        raise ValueError(f"unknown mutation operators {unknown}; known: {list(MUTATION_OPERATORS)}")
    return v


class SourceSpec(_Section):
    kind: str = Field(
        description="Loader kind: synthetic, humaneval, mbpp, apps, canonical (see "
        "codeloop.data.loaders); repository tasks: synthetic_repo, repo (a mint output dir), "
        "swebench (instances.jsonl; clones in clean.repos_dir)."
    )
    path: str = Field("", description="File path for file-based kinds; empty for packaged ones.")
    n: int = Field(0, ge=0, description="Synthetic only: number of tasks to generate.")
    seed: int = Field(0, description="Synthetic only: generator seed.")
    max_depth: int = Field(
        3, ge=1, le=8, description="Synthetic: max composition depth; synthetic_repo: call depth."
    )
    min_modules: int = Field(2, ge=2, le=6, description="synthetic_repo: fewest modules per repo.")
    max_modules: int = Field(4, ge=2, le=6, description="synthetic_repo: most modules per repo.")
    max_distance: int = Field(
        2, ge=0, le=7, description="synthetic_repo: most calls between the tested top and the bug."
    )
    tasks_per_repo: int = Field(
        3, ge=1, le=20, description="synthetic_repo: bugs planted per pristine repository."
    )
    operators: list[str] = Field(
        default_factory=list,
        description="synthetic_repo: mutation operators of the planted bugs (empty: all of "
        "codeloop.data.repos.mutate.OPERATORS; 'repairable' ones: synth.REPAIRABLE).",
    )

    @field_validator("operators")
    @classmethod
    def _known_ops(cls, v: list[str]) -> list[str]:
        return _check_operators(v)


class RepoTasksConfig(_Section):
    enabled: bool = Field(
        True,
        description="Add synthetic repository tasks (codeloop.data.repos.synth) to the training "
        "sources and their held-out frozen set 'heldout_repo' (agent episodes in rollout, "
        "sft's expert demos, evaluate's resolved rate).",
    )
    n: int = Field(
        60,
        ge=1,
        description="Synthetic repository tasks for training (clean verifies each in the "
        "sandbox: ~1.2-1.8 s a task on 2 shared cores, bench/repo_tasks.py).",
    )
    seed: int = Field(0, description="Generator seed of the training repositories.")
    heldout_n: int = Field(20, ge=0, description="Tasks of the held-out repositories (frozen).")
    heldout_seed: int = Field(
        1000, description="Generator seed of the held-out repositories (never a training seed)."
    )
    min_modules: int = Field(2, ge=2, le=6, description="Fewest modules per repository.")
    max_modules: int = Field(2, ge=2, le=6, description="Most modules per repository.")
    max_depth: int = Field(2, ge=1, le=8, description="Longest call chain (functions).")
    max_distance: int = Field(1, ge=0, le=7, description="Most calls between symptom and bug.")
    tasks_per_repo: int = Field(3, ge=1, le=20, description="Bugs planted per repository.")
    operators: list[str] = Field(
        default_factory=lambda: list(REPAIRABLE_OPERATORS),
        description="Mutation operators of the planted bugs, training and held-out alike "
        "(empty: all of codeloop.data.repos.mutate.OPERATORS; default: those whose fix can "
        "be read off the code, codeloop.data.repos.synth.REPAIRABLE).",
    )

    @field_validator("operators")
    @classmethod
    def _known_ops(cls, v: list[str]) -> list[str]:
        return _check_operators(v)

    @field_validator("heldout_seed")
    @classmethod
    def _distinct_seed(cls, v: int, info) -> int:
        if v == info.data.get("seed"):
            raise ValueError("heldout_seed must differ from seed (held-out repos are other seeds)")
        return v


class CleanConfig(_Section):
    sources: list[SourceSpec] = Field(
        default_factory=lambda: [SourceSpec(kind="synthetic", n=600, seed=0)],
        description="Training sources, by kind and path.",
    )
    frozen: list[SourceSpec] = Field(
        default_factory=lambda: [SourceSpec(kind="humaneval")],
        description="Frozen evaluation sets; never trained on, leak-checked against training.",
    )
    heldout_fraction: float = Field(
        0.15, ge=0, lt=1, description="Share of synthetic tasks held out as a frozen eval split."
    )
    dedupe_threshold: float = Field(
        0.9,
        gt=0,
        le=1,
        description="Near-dup if no number/contrast word differs and the mean of the prompt-"
        "word and canonical-code Jaccard (exact, on LSH candidates) >= this.",
    )
    dedupe_prompt_floor: float = Field(
        0.5, ge=0, le=1, description="Near-dup if canonical code is equal and prompt words >= this."
    )
    dedupe_lsh_threshold: float = Field(
        0.3, gt=0, le=1, description="LSH banding target (prompt MinHash) proposing candidates."
    )
    leak_threshold: float = Field(
        0.5, gt=0, le=1, description="Leak if mean prompt/code Jaccard to a frozen task >= this."
    )
    leak_view_threshold: float = Field(
        0.7, gt=0, le=1, description="Leak if prompt alone or code alone Jaccard >= this."
    )
    dedupe_workers: int = Field(2, ge=1, le=64, description="Processes computing MinHash.")
    num_perm: int = Field(128, ge=16, le=1024, description="MinHash permutations.")
    verify_runs: int = Field(3, ge=0, le=20, description="Runs of each reference (flakiness).")
    visible_fraction: float = Field(
        0.5, gt=0, le=1, description="Share of a task's tests that are visible (rest hidden)."
    )
    min_visible: int = Field(1, ge=1, description="Minimum visible tests per task.")
    repos_dir: str = Field(
        "", description="swebench sources: the dir of local git clones, named owner__name."
    )
    repo_near_threshold: float = Field(
        0.9,
        gt=0,
        le=1,
        description="Repository tasks: near-duplicate (and near leak) if the MinHash mean of "
        "statement-word and patch-code Jaccard >= this (templated statements share words: "
        "distinct synthetic tasks reach ~0.85).",
    )
    repo_verify_runs: int = Field(
        1,
        ge=0,
        le=20,
        description="Repository tasks: sandbox runs of the base and of the reference fix "
        "(executability filter; mixed outcomes drop a task as flaky). Minted tasks already "
        "ran 3x pristine at mint time.",
    )
    repo_tasks: RepoTasksConfig = Field(
        default_factory=RepoTasksConfig, description="The synthetic repository-task switch."
    )


class AgentConfig(_Section):
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


class RetentionConfig(_Section):  # what data/archive/ keeps (codeloop.data.archive)
    enabled: bool = Field(True, description="Append each promoted night to data/archive/.")
    sft_reward_threshold: float = Field(1.0, description="Reward >= this: always kept ('sft').")
    sample_per_stratum: int = Field(8, ge=0, description="Kept per (bucket, terminal_reason).")
    size_budget_mb: float = Field(512.0, gt=0, description="Past it: over_budget (strip/drop).")
    over_budget: Literal["drop", "strip"] = Field("strip", description="Rest past budget.")
    seed: int = Field(0, description="Seed of the stratified sample (mixed with the iteration).")


class RunnerConfig(_Section):
    kind: Literal["threads", "dask", "ray"] = Field("threads", description="Fan-out engine.")
    address: str = Field("", description="Dask scheduler / Ray address; empty = local cluster.")
    workers: int = Field(
        2, ge=1, description="Threads or LocalCluster processes; also rollout/score's chunk count."
    )
