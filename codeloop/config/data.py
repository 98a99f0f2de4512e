"""params.yaml's data sections: the clean stage's sources and thresholds (clean,
with the repository-task switch), the bucket stage's plan and curriculum (bucket)
and what data/archive/ keeps of each promoted night (retention).

Config imports nothing of the domain; codeloop.config re-exports every name.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from codeloop.config.section import Section


class CurriculumStage(Section):
    until: int = Field(ge=0, description="Last iteration (inclusive) this stage applies to.")
    proportions: list[float] = Field(description="Sampling share per bucket, easiest first.")


class BucketConfig(Section):
    n_buckets: int = Field(3, ge=1, le=20, description="Number of difficulty buckets.")
    proportions: list[float] = Field(
        default_factory=lambda: [0.4, 0.4, 0.2],
        description="Sampling share per bucket, easiest first; normalised to sum 1.",
    )
    tasks_per_iteration: int = Field(128, ge=1, description="Tasks the plan samples per iteration.")
    repo_tasks_per_iteration: int = Field(
        64,
        ge=0,
        description="> 0: repository (agent) tasks the plan samples per iteration, bucketed "
        "among repository tasks alone, on top of tasks_per_iteration function tasks; 0: one "
        "plan over every task, kinds mixed.",
    )
    seed: int = Field(0, description="Seed of the sampling plan.")
    curriculum: list[CurriculumStage] = Field(
        default_factory=lambda: [CurriculumStage(until=1, proportions=[0.6, 0.3, 0.1])],
        description="Proportions per iteration range; the first stage with until >= "
        "rollout.iteration applies, later iterations use bucket.proportions.",
    )
    pass_rate_weight: float = Field(
        0.8,
        ge=0,
        le=1,
        description="Weight of 1 - empirical pass rate vs the proxy score when history exists.",
    )


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


class SourceSpec(Section):
    kind: str = Field(
        description="Loader kind: synthetic, humaneval, mbpp, apps, canonical (see "
        "codeloop.data.loaders); repository tasks: synthetic_repo, repo (a mint output dir), "
        "mint (a `codeloop mint --repos-list` output dir: its training repositories' tasks, "
        "and its held-out ones as the frozen set heldout_mint), swebench (instances.jsonl; "
        "clones in clean.repos_dir)."
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


class RepoTasksConfig(Section):
    enabled: bool = Field(
        True,
        description="Add synthetic repository tasks (codeloop.data.repos.synth) to the training "
        "sources and their held-out frozen set 'heldout_repo' (agent episodes in rollout, "
        "sft's expert demos, evaluate's resolved rate).",
    )
    n: int = Field(
        240,
        ge=1,
        description="Synthetic repository tasks for training (clean verifies each in the "
        "sandbox, so its time grows with n: bench/repo_tasks.py).",
    )
    seed: int = Field(0, description="Generator seed of the training repositories.")
    heldout_n: int = Field(150, ge=0, description="Tasks of the held-out repositories (frozen).")
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


class AugmentConfig(Section):
    """Test augmentation of function tasks (codeloop.data.augment)."""

    enabled: bool = Field(
        True, description="Augment function tasks that have a reference solution."
    )
    n_random: int = Field(
        8, ge=0, le=200, description="Random inputs per task, shaped like the task's own."
    )
    max_candidates: int = Field(
        40, ge=1, le=1000, description="Candidate inputs the reference is run on, per task."
    )
    max_mutants: int = Field(
        12, ge=1, le=200, description="Reference mutants a task's tests are scored against."
    )
    max_tests: int = Field(
        6, ge=0, le=200, description="Most augmented tests kept per task (set cover order)."
    )
    min_tests: int = Field(
        2,
        ge=0,
        le=200,
        description="Augmented tests kept per task even when no more mutants fall (edge "
        "inputs ranked by hash), up to max_tests.",
    )
    visible_share: float = Field(
        0.25,
        ge=0,
        le=1,
        description="Share of a task's augmented tests that join its visible tests (reward); "
        "the rest join the hidden tests (evaluation and the hacking alarm).",
    )
    frozen: bool = Field(
        False,
        description="Augment the frozen sets too (HumanEval's pass@1 then stops being "
        "comparable with published figures); the held-out synthetic split always is.",
    )
    weak_mutation_score: float = Field(
        0.5,
        ge=0,
        le=1,
        description="A task whose tests kill fewer than this share of its reference's "
        "mutants is flagged weak in the report.",
    )
    drop_below: float = Field(
        0.0,
        ge=0,
        le=1,
        description="Drop (reason weak_tests) a task whose mutation score after augmentation "
        "is below this; 0 keeps every task.",
    )
    model_tests: str = Field(
        "",
        description="JSONL of model-written tests, one row {task_id, tests: [assert, ...]} "
        "(a judge model's, or tdd episodes'); each joins the task's hidden tests only if the "
        "reference passes it and a mutant of the reference fails it. Bad rows are quarantined.",
    )
    coverage: bool = Field(
        True,
        description="Measure statement and branch coverage of each reference by its visible "
        "and by all tests (sandboxed) for the report.",
    )


class CleanConfig(Section):
    sources: list[SourceSpec] = Field(
        default_factory=lambda: [SourceSpec(kind="synthetic", n=1000, seed=0)],
        description="Training sources, by kind and path.",
    )
    frozen: list[SourceSpec] = Field(
        default_factory=lambda: [SourceSpec(kind="humaneval")],
        description="Frozen evaluation sets; never trained on, leak-checked against training.",
    )
    heldout_fraction: float = Field(
        0.25, ge=0, lt=1,
        description="Share of synthetic tasks held out as a frozen eval split (the gate's "
        "paired test needs about 250 tasks to see a 0.05 drop).",
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
        "set above what distinct synthetic tasks reach).",
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
    augment: AugmentConfig = Field(
        default_factory=AugmentConfig, description="Test augmentation of function tasks."
    )


class RetentionConfig(Section):  # what data/archive/ keeps (codeloop.data.archive)
    enabled: bool = Field(True, description="Append each promoted night to data/archive/.")
    sft_reward_threshold: float = Field(1.0, description="Reward >= this: always kept ('sft').")
    sample_per_stratum: int = Field(8, ge=0, description="Kept per (bucket, terminal_reason).")
    size_budget_mb: float = Field(512.0, gt=0, description="Past it: over_budget (strip/drop).")
    over_budget: Literal["drop", "strip"] = Field("strip", description="Rest past budget.")
    seed: int = Field(0, description="Seed of the stratified sample (mixed with the iteration).")
