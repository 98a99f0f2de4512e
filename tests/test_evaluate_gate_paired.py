"""The paired gate: candidate and promoted policy compared task by task, with an exact
one-sided sign-flip test, a minimum detectable drop, and Δ ± SE in every reason."""

from __future__ import annotations

import itertools
import random

import pytest

from codeloop.config import Params
from codeloop.evaluate.gate import GateRule, TaskResults, decide
from codeloop.evaluate.history import make_row
from codeloop.evaluate.paired import compare, sign_flip_p
from codeloop.io import write_json
from codeloop.ops.promote import keep_eval_tasks
from codeloop.paths import Paths
from codeloop.stages.evaluate import eval_settings, task_results

RULE = GateRule(tolerance=0.05, alpha=0.05)


def _brute_p(diffs: list[float]) -> float:
    """Every sign pattern, counted: the definition the test must match."""
    obs = sum(diffs)
    pats = list(itertools.product((1, -1), repeat=len(diffs)))
    return sum(sum(s * d for s, d in zip(p, diffs, strict=True)) <= obs + 1e-9 for p in pats) / len(pats)


def _policy(rates: list[float], k: int, seed: int) -> dict[str, list[int]]:
    """Per-task [passed, k] of a policy with these true rates (a fixed draw)."""
    rng = random.Random(seed)
    return {f"t{i}": [sum(rng.random() < r for _ in range(k)), k] for i, r in enumerate(rates)}


def _flip(counts: dict[str, list[int]], down: int, up: int) -> dict[str, list[int]]:
    """The same results with `down` passing tasks failing and `up` failing tasks passing."""
    out = {t: list(v) for t, v in counts.items()}
    passing = [t for t, (p, _) in out.items() if p]
    failing = [t for t, (p, _) in out.items() if not p]
    for t in passing[:down]:
        out[t][0] = 0
    for t in failing[:up]:
        out[t][0] = out[t][1]
    return out


def _gate(promoted, candidate, rule=RULE):
    def p1(c):
        return sum(p / n for p, n in c.values()) / len(c)

    ev = {"sets": {"heldout": {"pass@1": p1(candidate), "infra_errors": 0}}}
    base = make_row(1, model_version="m", dataset_version="d", reward_fn_version="v1",
                    eval_metrics={"sets": {"heldout": {"pass@1": p1(promoted)}}})
    tasks = TaskResults({"heldout": candidate}, {"heldout": promoted})
    return decide(ev, base, rule, [], tasks)


RATES = [random.Random(7).random() for _ in range(90)]
PROMOTED = _policy(RATES, 2, seed=1)


def test_the_exact_p_value_counts_every_sign_pattern():
    rng = random.Random(3)
    for _ in range(30):
        diffs = [rng.choice([-1, -0.5, 0, 0.5, 1]) for _ in range(rng.randint(1, 10))]
        p, method = sign_flip_p(diffs, 2)
        assert method == "sign-flip exact"
        assert p == pytest.approx(_brute_p(diffs))


def test_off_the_lattice_a_fixed_seed_monte_carlo_stands_in_and_agrees():
    diffs = [0.3, -0.7, -0.11, 0.05, -0.9, -0.2, 0.4, -0.33, -0.6, 0.1, -0.45, -0.8]
    p, method = sign_flip_p(diffs, 10**9)
    assert method == "sign-flip monte carlo"
    assert p == pytest.approx(_brute_p(diffs), abs=0.01)
    assert sign_flip_p(diffs, 10**9) == (p, method)  # a rerun of the night gives the same p


def test_with_one_sample_five_tasks_must_flip_before_a_drop_can_be_called():
    base = {f"t{i}": [1, 1] for i in range(90)}
    four = compare(base, _flip(base, 4, 0), 0.05)
    five = compare(base, _flip(base, 5, 0), 0.05)
    assert four.p_value == pytest.approx(1 / 16) and five.p_value == pytest.approx(1 / 32)
    assert compare(base, base, 0.05).mdd == pytest.approx(5 / 90)


def test_samples_that_always_agree_count_as_one_in_the_minimum_detectable_drop():
    agreeing = {f"t{i}": [2 * (i % 2), 2] for i in range(90)}
    assert compare(agreeing, agreeing, 0.05).mdd == pytest.approx(5 / 90)
    one_split = {**agreeing, "t0": [1, 2]}
    assert compare(one_split, one_split, 0.05).mdd == pytest.approx(5 / 180)


def test_a_clearly_worse_candidate_is_refused():
    d = _gate(PROMOTED, _flip(PROMOTED, 15, 1))
    assert not d.promote
    assert d.paired["heldout"]["verdict"] == "worse"
    assert any("worse" in r and "heldout" in r for r in d.reasons)


def test_an_identical_candidate_is_promoted_and_the_set_can_detect_the_tolerance():
    d = _gate(PROMOTED, PROMOTED)
    assert d.promote
    assert d.paired["heldout"]["verdict"] == "no significant drop"
    assert d.paired["heldout"]["mdd"] <= RULE.tolerance


def test_a_noise_level_change_is_not_refused():
    d = _gate(PROMOTED, _flip(PROMOTED, 4, 2))
    assert d.promote, d.reasons
    assert d.paired["heldout"]["delta"] < 0


def test_a_drop_beyond_the_tolerance_that_noise_explains_is_not_refused():
    half = {f"t{i}": [i % 2, 1] for i in range(90)}
    d = _gate(half, _flip(half, 10, 5))  # 15 tasks changed, 10 of them down: p 0.15
    assert d.paired["heldout"]["delta"] == pytest.approx(-5 / 90)
    assert d.paired["heldout"]["p_value"] == pytest.approx(0.150879, abs=1e-5)
    assert d.promote, d.reasons


def test_an_independent_resample_of_the_same_policy_is_not_refused():
    # another seed: noise only, and far more of it than the same seeds leave
    d = _gate(PROMOTED, _policy(RATES, 2, seed=2))
    assert d.promote, d.reasons


def test_a_significant_drop_within_the_tolerance_is_not_refused():
    many = {f"t{i}": [1, 1] for i in range(400)}
    r = _gate(many, _flip(many, 12, 0))
    assert r.paired["heldout"]["p_value"] < RULE.alpha
    assert r.promote and r.paired["heldout"]["delta"] == pytest.approx(-0.03)


def test_a_small_set_says_inconclusive_and_what_it_could_detect():
    small = {f"t{i}": [i % 2, 1] for i in range(20)}
    d = _gate(small, _flip(small, 2, 0))
    assert d.promote  # a drop of 0.10, but two flips are not significant
    assert d.paired["heldout"]["verdict"] == "inconclusive"
    assert any("inconclusive" in n and "minimum detectable drop 0.250" in n for n in d.notes)


def test_every_reason_carries_the_paired_delta_and_its_standard_error():
    d = _gate(PROMOTED, _flip(PROMOTED, 15, 1))
    r = d.paired["heldout"]
    assert f"Δ pass@1 {r['delta']:+.4f} ± {r['se']:.4f}" in d.reasons[0]
    assert "one-sided p" in d.reasons[0]


def test_without_the_promoted_policys_task_results_the_gate_says_it_is_unpaired():
    ev = {"sets": {"heldout": {"pass@1": 0.30, "infra_errors": 0}}}
    base = make_row(2, model_version="m", dataset_version="d", reward_fn_version="v1",
                    eval_metrics={"sets": {"heldout": {"pass@1": 0.40}}})
    tasks = TaskResults({"heldout": PROMOTED}, None, "no per-task results were kept")
    d = decide(ev, base, RULE, [], tasks)
    assert not d.promote
    assert "unpaired: no per-task results were kept" in d.reasons[0]


@pytest.fixture
def workspace(tmp_path):
    paths = Paths(tmp_path)
    params = Params()
    write_json(paths.eval_tasks, {"settings": eval_settings(params), "sets": {"h": PROMOTED}})
    return params, paths


def test_promotion_keeps_the_candidates_task_results_for_the_next_gate(workspace):
    params, paths = workspace
    keep_eval_tasks(paths, "iter-0004")
    got = task_results(params, paths, {"task_counts": {"h": PROMOTED}}, {"tag": "iter-0004"})
    assert got.promoted == {"h": PROMOTED} and got.why == ""


def test_task_results_of_another_iteration_are_never_paired(workspace):
    params, paths = workspace
    keep_eval_tasks(paths, "iter-0003")
    got = task_results(params, paths, {"task_counts": {}}, {"tag": "iter-0004"})
    assert got.promoted is None and "iter-0003" in got.why


def test_task_results_under_other_evaluate_settings_are_never_paired(workspace):
    params, paths = workspace
    keep_eval_tasks(paths, "iter-0004")
    other = params.model_copy(update={
        "evaluate": params.evaluate.model_copy(update={"temperature": 0.9})
    })
    got = task_results(other, paths, {"task_counts": {}}, {"tag": "iter-0004"})
    assert got.promoted is None and "other evaluate settings" in got.why


def test_a_promotion_without_task_results_drops_the_stale_ones(workspace):
    _, paths = workspace
    keep_eval_tasks(paths, "iter-0004")
    paths.eval_tasks.unlink()
    keep_eval_tasks(paths, "iter-0005")
    assert not paths.eval_baseline.exists()


def test_a_corrupt_kept_baseline_sends_the_gate_unpaired_with_a_reason_naming_the_file(workspace):
    params, paths = workspace
    keep_eval_tasks(paths, "iter-0004")
    paths.eval_baseline.write_text('{"tag": "iter-0004", "sets": {')
    got = task_results(params, paths, {"task_counts": {"h": PROMOTED}}, {"tag": "iter-0004"})
    ev = {"sets": {"h": {"pass@1": 0.5, "infra_errors": 0}}}
    d = decide(ev, {"tag": "iter-0004", "pass_at_1": {"h": 0.5}}, RULE, [], got)
    assert d.paired["h"]["verdict"] == "unpaired"
    assert f"{paths.eval_baseline}: not valid JSON" in d.notes[0]


@pytest.mark.parametrize(("content", "field"), [
    ('["iter-0004"]', "top level must be an object"),
    ('{"tag": "iter-0004", "sets": []}', "field 'sets'"),
    ('{"tag": "iter-0004", "sets": {"h": [1, 2]}}', "field 'sets.h'"),
    ('{"tag": "iter-0004", "sets": {"h": {"t0": [3, 2]}}}', "field 'sets.h.t0'"),
    ('{"tag": "iter-0004", "sets": {"h": {"t0": "1/2"}}}', "field 'sets.h.t0'"),
    ('{"tag": 4, "sets": {}}', "field 'tag'"),
])
def test_a_badly_shaped_kept_baseline_is_named_by_file_and_field(workspace, content, field):
    params, paths = workspace
    paths.eval_baseline.parent.mkdir(parents=True)
    paths.eval_baseline.write_text(content)
    got = task_results(params, paths, {"task_counts": {"h": PROMOTED}}, {"tag": "iter-0004"})
    assert got.promoted is None
    assert str(paths.eval_baseline) in got.why and field in got.why


def test_misshapen_task_results_are_not_kept_as_the_next_baseline(workspace):
    _, paths = workspace
    keep_eval_tasks(paths, "iter-0004")
    paths.eval_tasks.write_text('{"sets": {"h": {"t0": [1]}}}')
    keep_eval_tasks(paths, "iter-0005")
    assert not paths.eval_baseline.exists()
