"""params.yaml's evaluate section: frozen-set sampling and the promotion gate's
tolerance and test level.

Config imports nothing of the domain; codeloop.config re-exports every name.
"""

from __future__ import annotations

from pydantic import Field

from codeloop.config.section import Section


class EvaluateConfig(Section):
    samples_per_task: int = Field(
        1, ge=1, le=200,
        description="n per frozen task for pass@k. Samples that agree (near-greedy "
        "temperatures) add nothing to the gate's paired test: a set then needs "
        "ceil(log2(1/gate_alpha)) whole flipped tasks to call a drop.",
    )
    temperature: float = Field(0.2, gt=0, le=5, description="Sampling temperature at eval.")
    max_new_tokens: int = Field(128, ge=1, le=8192, description="Tokens per generation.")
    max_steps: int = Field(1, ge=1, le=20, description="Turns per eval episode.")
    agent_max_new_tokens: int = Field(
        96, ge=1, le=8192, description="Tokens per tool call in repo-task eval episodes."
    )
    max_tasks_per_set: int = Field(0, ge=0, description="Cap per frozen set; 0 = all.")
    gate_tolerance: float = Field(
        0.05, ge=0, le=1,
        description="Largest pass@1 drop (absolute) a candidate may show before a "
        "significant drop refuses promotion; also the drop a set must be able to detect "
        "not to be called inconclusive.",
    )
    gate_alpha: float = Field(
        0.05, gt=0, lt=0.5,
        description="One-sided level of the gate's paired sign-flip test: a drop refuses "
        "only when its p-value is below this.",
    )
