"""The critic stage: trained on scored trajectories, measured on unseen tasks, shipped
with the promoted checkpoint, and used by evaluation for critic-guided selection."""

from __future__ import annotations

import json
import random
import shutil
import subprocess
from pathlib import Path

import pytest

from codeloop.cli import main as cli
from codeloop.config import CriticConfig, SandboxConfig
from codeloop.data.generator import generate_tasks
from codeloop.evaluate.metrics import Episode, critic_selected_rate
from codeloop.io import write_tasks, write_trajectories
from codeloop.ops.vcs import dvc_cmd
from codeloop.paths import Paths
from codeloop.rewards import score_trajectories
from codeloop.rewards.critic import Critic, in_holdout, mutants, roc_auc
from codeloop.sandbox import make_executor
from codeloop.sandbox.base import ExecResult
from tests._rewards_fixtures import traj

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def scored(tmp_path_factory):
    """80 synthetic tasks, reference + mutants each as trajectories, scored (v1) for real."""
    tasks = generate_tasks(80, seed=11)
    rng = random.Random(0)
    rows = []
    for t in tasks:
        cands = [t.reference_solution, *mutants(t.reference_solution)]
        rng.shuffle(cands)
        rows += [traj(c, tid=f"{t.task_id}-{i}", task=t) for i, c in enumerate(cands)]
    ex = make_executor(SandboxConfig(timeout_s=2.0, workers=2))
    try:
        trajs = score_trajectories(rows, {t.task_id: t for t in tasks}, "v1", ex, hidden=False)
    finally:
        ex.close()
    root = tmp_path_factory.mktemp("critic-stage")
    write_trajectories(Paths(root).trajectories_dir, trajs)
    write_tasks(Paths(root).bucket_tasks, tasks)
    return root, tasks, trajs


def test_roc_auc_equals_the_pairwise_definition_with_ties():
    rng = random.Random(1)
    for _ in range(200):
        s = [rng.choice([0.1, 0.5, rng.random()]) for _ in range(rng.randint(2, 25))]
        y = [rng.random() < 0.4 for _ in s]
        pos = [a for a, b in zip(s, y, strict=True) if b]
        neg = [a for a, b in zip(s, y, strict=True) if not b]
        ref = (
            sum((p > n) + 0.5 * (p == n) for p in pos for n in neg) / (len(pos) * len(neg))
            if pos and neg
            else None
        )
        got = roc_auc(s, y)
        assert got == ref if ref is None else got == pytest.approx(ref)


def test_the_holdout_split_is_by_task_and_deterministic():
    ids = [f"task-{i}" for i in range(2000)]
    held = [i for i in ids if in_holdout(i, 0.2, 0)]
    assert held == [i for i in ids if in_holdout(i, 0.2, 0)]
    assert 0.17 < len(held) / len(ids) < 0.23
    assert held != [i for i in ids if in_holdout(i, 0.2, 1)]


def test_the_critic_flow_writes_a_critic_that_ranks_unseen_tasks_better_than_chance(
    scored, prefect_harness
):
    from flows.critic import critic

    root, _, _ = scored
    shutil.copy(REPO / "params.yaml", root / "params.yaml")
    metrics = critic(root=str(root))
    assert (Paths(root).critic_model / "critic.json").exists()
    assert json.loads((Paths(root).metrics("critic")).read_text()) == metrics
    assert metrics["n_train"] + metrics["n_holdout"] == metrics["n_examples"] > 0
    assert metrics["skipped"] == {}  # every scored row of a known task is used
    assert metrics["holdout_auc"] > 0.6


def test_critic_selection_beats_pass_at_1_on_held_out_tasks(scored):
    _, tasks, trajs = scored
    by_id = {t.task_id: t for t in tasks}
    train = [t for t in tasks if not in_holdout(t.task_id, 0.3, 0)]
    examples = [
        (by_id[r.task_id], r.final_code, r.reward_components["binary_pass"])
        for r in trajs
        if by_id[r.task_id] in train
    ]
    model = Critic.fit(examples)
    episodes = [
        Episode(
            task_id=r.task_id,
            difficulty=0,
            steps=1,
            failed_attempts=0,
            terminal_reason="",
            visible=ExecResult(status="passed" if r.reward_components["binary_pass"] else "failed"),
            hidden=None,
            code=r.final_code,
        )
        for r in trajs
        if in_holdout(r.task_id, 0.3, 0)
    ]
    random_pick = sum(e.correct for e in episodes) / len(episodes)
    assert critic_selected_rate(episodes, by_id, model) > random_pick + 0.2


def test_the_critic_command_trains_and_reports_and_refuses_unlabelled_input(scored, capsys):
    root, _, _ = scored
    out = root / "cli-critic"
    args = ["--trajectories", str(Paths(root).trajectories_dir)]
    args += ["--tasks", str(Paths(root).bucket_tasks), "--out", str(out)]
    assert cli(["critic", *args, "--params", str(REPO / "params.yaml")]) == 0
    assert json.loads(capsys.readouterr().out)["n_examples"] > 0
    assert Critic.load(out).dim == 1 << CriticConfig().dim_bits
    empty = root / "empty-tasks.parquet"
    write_tasks(empty, [])
    args[3] = str(empty)
    assert cli(["critic", *args, "--params", str(REPO / "params.yaml")]) == 2
    err = capsys.readouterr().err
    assert "no scored trajectory" in err and "unknown_task" in err  # the skipped rows, counted


def _promote_repo(tmp_path: Path, version: str) -> Path:
    repo = tmp_path / f"repo-{version}"
    repo.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    subprocess.run(dvc_cmd("init", "-q"), cwd=repo, check=True)
    params = (REPO / "params.yaml").read_text()
    # the shipped params name no critic_path (v2-critic is unreleased): a user choosing it
    # adds the key, which promotion then repoints
    reward = f'version: {version}\n  critic_path: ""\n  # '
    (repo / "params.yaml").write_text(params.replace("version: v1 ", reward))
    (repo / "history").mkdir()
    (Paths(repo).candidate_model).mkdir(parents=True)
    (Paths(repo).candidate_model / "weights.bin").write_bytes(b"w")
    Critic.fit([(generate_tasks(1, seed=0)[0], "def f():\n    return 1\n", 1.0)]).save(
        Paths(repo).critic_model
    )
    return repo


@pytest.mark.parametrize("version,points", [("v2-critic", True), ("v2", False)])
def test_promotion_ships_the_critic_and_points_v2_critic_at_it(tmp_path, version, points):
    from codeloop.config import load_params
    from codeloop.evaluate.history import make_row
    from codeloop.ops.promote import promote

    repo = _promote_repo(tmp_path, version)
    assert load_params(repo / "params.yaml").reward.version == version
    row = make_row(1, model_version="m", dataset_version="d", reward_fn_version=version,
                   eval_metrics={"sets": {}})
    promote(repo, 1, row, {})
    assert (repo / "models/iter-0001/critic/critic.json").exists()
    path = load_params(repo / "params.yaml").reward.critic_path
    assert path == ("models/iter-0001/critic" if points else "")
