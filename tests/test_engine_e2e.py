"""The whole pipeline sampled by vLLM: `dvc repro` in a temp git copy of the repo on tiny
params with repository tasks on and ``policy.engine: vllm``. Rollout and evaluate sample
through the engine beside their stage (vLLM's CPU backend here), train corrects the
engine's rows against the policy as the iteration starts, and the stage graph stays
cached on a second repro."""

from __future__ import annotations

import json
import os

import pytest
import yaml

from codeloop.io import read_tasks, read_trajectories
from codeloop.paths import Paths
from codeloop.policy.vllm_engine import engine_python
from tests._engine import require_engine
from tests._prefect_api import post
from tests._tiny_repo import copy_repo as _copy_repo
from tests._tiny_repo import git as _git
from tests._tiny_repo import merge as _merge
from tests.test_pipeline_agent_e2e import AGENT_TINY
from tests.test_pipeline_e2e import _dvc

pytestmark = pytest.mark.slow

# head size 32 (n_embd / n_head): vLLM's CPU attention kernels need at least that
ENGINE_TINY = _merge(
    AGENT_TINY,
    {
        "policy_init": {"n_embd": 64, "n_head": 2},
        "policy": {"engine": "vllm"},
        "rollout": {"async_turns": True},
        # a 10-step SFT ties most groups; tied groups join the update (advantage 0), so
        # train sees, and corrects, every engine row
        "train": {"skip_tied_groups": False},
    },
)


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory, repo_root, prefect_harness):
    require_engine()
    work = tmp_path_factory.mktemp("repo")
    _copy_repo(repo_root, work)
    params = yaml.safe_load((work / "params.yaml").read_text())
    (work / "params.yaml").write_text(yaml.safe_dump(_merge(params, ENGINE_TINY), sort_keys=False))
    _git(work, "init", "-q")
    _git(work, "add", "-A")
    _git(work, "commit", "-qm", "tiny engine")
    # the copy has no .venv-vllm beside its codeloop/: the stages use this checkout's engine
    before = os.environ.get("CODELOOP_ENGINE_PYTHON")
    os.environ["CODELOOP_ENGINE_PYTHON"] = engine_python()
    try:
        first = _dvc(work, "repro")
        yield work, first
    finally:
        if before is None:
            os.environ.pop("CODELOOP_ENGINE_PYTHON", None)
        else:
            os.environ["CODELOOP_ENGINE_PYTHON"] = before


def _rows(work):
    repo_ids = {t.task_id for t in read_tasks(Paths(work).bucket_tasks) if t.kind == "repo"}
    rows = read_trajectories(Paths(work).rollouts_dir)
    return [t for t in rows if t.task_id in repo_ids], [t for t in rows if t.task_id not in repo_ids]


def _layout_ok(t) -> bool:
    """The trainer's layout: one mask bit and one log-prob per token, log-probs only (and
    all negative) on generated tokens, the prompt first and never trained on."""
    n = len(t.token_ids)
    gen = [i for i, m in enumerate(t.loss_mask) if m]
    return (
        len(t.loss_mask) == n == len(t.sample_logprobs)
        and bool(gen)
        and t.loss_mask[0] == 0
        and all(t.sample_logprobs[i] == 0.0 for i, m in enumerate(t.loss_mask) if not m)
        and all(t.sample_logprobs[i] < 0.0 for i in gen)
    )


def test_engine_e2e_rollout_rows_of_both_kinds_were_sampled_by_vllm(pipeline):
    work, _ = pipeline
    agent, function = _rows(work)
    assert agent and function
    assert {t.metadata.engine for t in agent + function} == {"vllm"}
    assert all(a.action_type == "tool" and a.raw for t in agent for a in t.actions)


def test_engine_e2e_rows_keep_the_token_layout_the_trainer_reads(pipeline):
    work, _ = pipeline
    agent, function = _rows(work)
    assert [t.trajectory_id for t in agent + function if not _layout_ok(t)] == []


def test_engine_e2e_rollout_metrics_carry_the_engine_block(pipeline):
    work, _ = pipeline
    block = json.loads(Paths(work).metrics("rollout").read_text())["engine"]
    assert block["engine"] == "vllm" and block["engines"] == 1
    assert block["start_s"] > 0 and block["requests"] > 0 and block["tokens_per_s"] > 0


def test_engine_e2e_evaluate_sampled_every_frozen_set(pipeline):
    work, _ = pipeline
    sets = json.loads(Paths(work).metrics("evaluate").read_text())["sets"]
    assert {"heldout_repo"} < set(sets)
    assert all(s["n_tasks"] > 0 for s in sets.values())


def test_engine_e2e_train_corrected_the_engine_rows(pipeline):
    work, _ = pipeline
    train = json.loads(Paths(work).metrics("train").read_text())
    assert train["engine_rows"] > 0
    assert 0.0 <= train["engine_logp_gap"] < 1e-3  # the same float32 weights, another kernel


def _ui_tables(key: str) -> list[dict]:
    from prefect.settings import PREFECT_API_URL

    found = post(PREFECT_API_URL.value(), "/artifacts/filter",
                 {"artifacts": {"key": {"any_": [key]}}})
    return [row for a in found
            for row in (a["data"] if isinstance(a["data"], list) else json.loads(a["data"]))]


def test_engine_e2e_the_ui_shows_the_rollouts_engine_table(pipeline):
    work, _ = pipeline
    block = json.loads(Paths(work).metrics("rollout").read_text())["engine"]
    rows = _ui_tables("engine-rollout")
    assert any((r["requests"], r["generated_tokens"]) == (block["requests"],
                                                          block["generated_tokens"])
               for r in rows)


def test_engine_e2e_the_ui_shows_trains_correction_of_the_engine_rows(pipeline):
    work, _ = pipeline
    train = json.loads(Paths(work).metrics("train").read_text())
    assert any(r["engine_rows"] == train["engine_rows"] for r in _ui_tables("engine-train"))


def test_engine_e2e_a_second_repro_runs_no_stage(pipeline):
    work, _ = pipeline
    assert "Running stage" not in _dvc(work, "repro").stdout
