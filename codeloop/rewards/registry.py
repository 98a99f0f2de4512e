"""Named, versioned reward compositions; ``reward.version`` in params.yaml selects one.

A composition maps one episode's evidence (task, final code, the VISIBLE-test sandbox
result, the actions) to a scalar reward, its named components and per-step rewards.
A *released* composition is immutable: tests/test_score_golden.py pins its outputs on
fixed inputs, so changing its behaviour means registering a new version. Hidden tests are
not an input of any composition: they are diagnostics only.

Episode modes add terms of their own on top, by mode, outside the compositions
(codeloop.rewards.modes): ``test_quality`` x ``reward.tdd_weight`` for tdd rows (the
model's own asserts judged on the reference and on its failed codes) and
``explains_failing_line`` x ``reward.explain_weight`` for rubber_duck rows. A row keeps
the registry version in ``reward_fn_version``; rows of other modes are scored as before.
Which version a row gets is its task kind's (codeloop.rewards.kinds).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from codeloop.config import REWARD_VERSIONS
from codeloop.rewards import components as C
from codeloop.rewards.code_signals import HACK_FLAGS, hack_flags
from codeloop.rewards.components import rounded
from codeloop.rewards.repo_terms import repo_reward
from codeloop.sandbox.base import ExecResult
from codeloop.schema import Action, Task


@dataclass(frozen=True)
class RewardInput:
    """Everything a composition may look at (and nothing about hidden tests)."""

    task: Task
    code: str
    visible: ExecResult
    actions: list[Action] = field(default_factory=list)
    judge_score: float | None = None  # in [0, 1]; only for versions with needs_judge
    critic_score: float | None = None  # predicted pass probability; needs_critic
    repo: object | None = None  # repository tasks: the judge's RepoVerdict (v3)


@dataclass(frozen=True)
class RewardOutput:
    reward: float
    components: dict[str, float]
    step_rewards: list[float]


@dataclass(frozen=True)
class Composition:
    name: str
    compute: Callable[[RewardInput], RewardOutput]
    released: bool = True  # pinned by the golden test; never edit a released one
    needs_judge: bool = False
    needs_critic: bool = False

    @property
    def doc(self) -> str:
        return (self.compute.__doc__ or "").strip()


def reward_v1(inp: RewardInput) -> RewardOutput:
    """Spine reward: visible pass rate; syntax error or no code -0.5; timeout -> 0.

    Why: the visible-test pass rate is the main, reproducible signal: it
    is what the frozen evaluation measures. Unparsable output gets a negative score so the policy cannot dodge tests by
    emitting garbage; a timeout is 0, i.e. as bad
    as failing every test but not worse than a syntax error. No step rewards.
    """
    res = inp.visible
    timeout = C.is_timeout(res)
    syntax = -0.5 if C.is_syntax_failure(res) else 0.0
    rate = C.pass_rate(res)
    comps = {
        "pass_rate": rounded(rate),
        "binary_pass": C.binary_pass(res),
        "syntax_penalty": syntax,
        "timeout": 1.0 if timeout else 0.0,
    }
    reward = 0.0 if timeout else rate + syntax
    return RewardOutput(rounded(reward), comps, [0.0] * len(inp.actions))


V2_W_RLTF = 0.5
V2_W_BINARY = 0.3
V2_SYNTAX = -0.5
V2_HACK = 0.5


def _v2_parts(inp: RewardInput) -> tuple[dict[str, float], list[float]]:
    res, task = inp.visible, inp.task
    timeout = C.is_timeout(res)
    flags = hack_flags(inp.code, task.visible_tests, task.entry_point, task.io_style)
    steps = C.process_rewards(inp.actions)
    comps = {
        "pass_rate": rounded(C.pass_rate(res)),
        "binary_pass": C.binary_pass(res),
        "rltf": 0.0 if timeout else rounded(C.rltf_partial_credit(res, task.io_style)),
        "syntax_penalty": V2_SYNTAX if C.is_syntax_failure(res) else 0.0,
        "timeout": 1.0 if timeout else 0.0,
        "process": rounded(sum(steps)),
        "length_penalty": rounded(C.length_penalty(inp.code, task.reference_solution)),
    }
    for name in HACK_FLAGS:
        comps[f"hack_{name}"] = 1.0 if flags[name] else 0.0
    comps["hack_penalty"] = V2_HACK if any(flags.values()) else 0.0
    return comps, [rounded(s) for s in steps]


def _v2_total(c: dict[str, float]) -> float:
    outcome = 0.0 if c["timeout"] else V2_W_RLTF * c["rltf"] + V2_W_BINARY * c["binary_pass"]
    return outcome + c["syntax_penalty"] + c["process"] - c["length_penalty"] - c["hack_penalty"]


def reward_v2(inp: RewardInput) -> RewardOutput:
    """Full reward: 0.5 RLTF partial credit + 0.3 binary pass + process - penalties.

    Why these weights: a fully passing, honest program scores 0.8 - length (>= 0.65 even
    with the worst process and length terms); the best failing program scores below 0.6
    (RLTF < 1, no binary bonus, process <= 0.1), so shaping never outweighs passing.
    RLTF-style credit separates "almost right" (right type, wrong value: 0.3 per test) from
    "completely wrong", which gives GRPO groups variance where binary rewards tie.
    Process rewards are potential-based (see components.process_rewards) and written per
    step. Syntax failure -0.5 as v1; a timeout zeroes the outcome terms. Any anti-hack
    flag costs 0.5: enough that a flagged pass ranks below an honest partial solution's
    neighbourhood, while a false positive still leaves passing code above failing code.
    """
    comps, steps = _v2_parts(inp)
    return RewardOutput(rounded(_v2_total(comps)), comps, steps)


def reward_v2_critic(inp: RewardInput) -> RewardOutput:
    """v2 plus 0.1 x critic pass probability (CodeRL-style dense reward).

    Why 0.1: the critic is a learned estimate that can be wrong or gamed; it is there to
    break ties among failing programs, never to outrank a passing one.
    """
    comps, steps = _v2_parts(inp)
    comps["critic"] = rounded(inp.critic_score or 0.0)
    return RewardOutput(rounded(_v2_total(comps) + 0.1 * comps["critic"]), comps, steps)


def reward_v2_judge(inp: RewardInput) -> RewardOutput:
    """v2 plus 0.15 x LLM-judge score in [0, 1] (a judge weight kept small, within 0.1-0.2).

    Why small: a judge is flexible but noisy and expensive; execution stays the main
    signal (0.8 of the maximum).
    """
    comps, steps = _v2_parts(inp)
    comps["judge"] = rounded(inp.judge_score or 0.0)
    return RewardOutput(rounded(_v2_total(comps) + 0.15 * comps["judge"]), comps, steps)


def reward_v3(inp: RewardInput) -> RewardOutput:
    """Repository tasks: 1.0 resolved + 0.3 RLTF-style F2P credit + process - penalties.

    Evidence is the judge's verdict on the final diff (codeloop.agent.judge: fresh tree,
    test files restored, F2P/P2P/hidden run in the sandbox), never the agent's own test
    runs. Why these weights: a resolved episode scores >= 1.3 - costs; the best unresolved
    one 0.3 + 0.1 process, so shaping never outranks resolving. A broken PASS_TO_PASS costs
    0.5 x the broken share (regressions are worse than no progress); a diff that does not
    apply costs 0.2 (no dodging by garbage). Process: potential differences over the
    visible pass count of successive run_tests observations (breaking and re-fixing nets
    0). 0.002 per step and 0.02 per malformed call. A disqualifying hack flag zeroes the
    pass terms (codeloop.rewards.repo_terms).
    """
    if inp.repo is None:
        raise ValueError(f"reward v3 scores repository tasks: no verdict for {inp.task.task_id}")
    reward, comps, steps = repo_reward(inp.repo, inp.task, inp.actions)
    return RewardOutput(reward, comps, steps)


def reward_v4(inp: RewardInput) -> RewardOutput:
    """v3 with the process term from trusted outcomes: each run_tests observation counts
    at most the visible passes the judge saw on the final diff (an agent's own test runs
    can be forged from the code under test; the judge's cannot be bought wholesale), and a
    patch the judge could not handle (judge_error) is a failure like a diff that does not
    apply, never an excluded row.

    Why: under RL pressure a policy finds any pass count it can print itself; the judge's
    count on the submitted diff is the only one a forgery cannot move, and a judge error
    that excluded the row would be a way to dodge a low reward.
    """
    if inp.repo is None:
        raise ValueError(f"reward v4 scores repository tasks: no verdict for {inp.task.task_id}")
    reward, comps, steps = repo_reward(inp.repo, inp.task, inp.actions, trusted_process=True)
    return RewardOutput(reward, comps, steps)


REGISTRY: dict[str, Composition] = {
    "v1": Composition("v1", reward_v1),
    "v2": Composition("v2", reward_v2),
    "v3": Composition("v3", reward_v3),
    "v4": Composition("v4", reward_v4),
    # Model-based versions are not golden-pinned: their score depends on a model file or
    # an endpoint, so replay only agrees when that model is the same.
    "v2-critic": Composition("v2-critic", reward_v2_critic, released=False, needs_critic=True),
    "v2-judge": Composition("v2-judge", reward_v2_judge, released=False, needs_judge=True),
}

# config.py validates reward.version against its own list of names (config may not import
# this module, which stands on the sandbox); both must name the same compositions.
if set(REGISTRY) != set(REWARD_VERSIONS):
    raise ImportError(
        f"codeloop.config.REWARD_VERSIONS {sorted(REWARD_VERSIONS)} != registered {sorted(REGISTRY)}"
    )


class UnknownRewardVersion(KeyError):
    pass


def get_composition(version: str) -> Composition:
    """The composition registered under ``version``; the error lists the known ones."""
    try:
        return REGISTRY[version]
    except KeyError:
        known = ", ".join(sorted(REGISTRY))
        raise UnknownRewardVersion(f"unknown reward version {version!r}; known: {known}") from None
