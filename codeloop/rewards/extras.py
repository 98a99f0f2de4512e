"""Model-based reward inputs built from params: the optional judge and critic.

Only versions that need them build them (``Composition.needs_judge/needs_critic``), so
the default run never touches a model file or the network.
"""

from __future__ import annotations

from codeloop.config import RewardConfig
from codeloop.rewards.critic import Critic
from codeloop.rewards.llm_judge import make_judge
from codeloop.rewards.registry import get_composition


def build_extras(cfg: RewardConfig, version: str | None = None) -> dict:
    """``{"judge": ..., "critic": ...}`` for ``version`` (default cfg.version), None if unused."""
    comp = get_composition(version or cfg.version)
    judge = critic = None
    if comp.needs_judge:
        judge = make_judge(
            cfg.judge_kind,
            cfg.judge_url,
            model=cfg.judge_model,
            api_key_env=cfg.judge_api_key_env,
            timeout_s=cfg.judge_timeout_s,
        )
    if comp.needs_critic:
        if not cfg.critic_path:
            raise ValueError(f"reward.version {comp.name} needs reward.critic_path (a critic dir)")
        critic = Critic.load(cfg.critic_path)
    return {"judge": judge, "critic": critic}


def build_extras_for(cfg: RewardConfig, versions: set[str]) -> dict:
    """Extras covering every version in ``versions`` (replay of mixed-version data)."""
    out: dict = {"judge": None, "critic": None}
    for v in sorted(versions):
        if not v:
            continue
        for k, val in build_extras(cfg, v).items():
            out[k] = out[k] or val
    return out
