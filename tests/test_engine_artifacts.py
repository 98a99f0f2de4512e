"""The Prefect UI's view of an inference engine (tasks/artifacts.py, tasks/steps.ARTIFACTS):
the rollout's engine block and train's correction of the engine's rows as table
artifacts, read back from a real Prefect server, and none where hf sampled."""

from __future__ import annotations

import json

import pytest

from codeloop.policy.engine_policy import EngineStats, engine_metrics
from tests._prefect_api import post

KEYS = ["engine-rollout", "engine-train"]
ENGINE_SUMMARY = {"model_version": "abc123", "n_in_update": 8, "engine_rows": 8,
                  "engine_logp_gap": 0.0123456, "engine_is_truncated": 0.25,
                  "engine_is_weight_mean": 0.98}
HF_SUMMARY = {"model_version": "abc123", "n_in_update": 8}


def _artifacts(state) -> dict[str, dict]:
    from prefect.settings import PREFECT_API_URL

    run_id = str(state.state_details.flow_run_id)
    body = {"artifacts": {"key": {"any_": KEYS}, "flow_run_id": {"any_": [run_id]}}}
    return {a["key"]: a for a in post(PREFECT_API_URL.value(), "/artifacts/filter", body)}


def _table(artifact: dict) -> list[dict]:
    data = artifact["data"]
    return data if isinstance(data, list) else json.loads(data)


@pytest.fixture(scope="module")
def published(prefect_harness):
    from prefect import flow

    from tasks.steps import ARTIFACTS, as_task

    stats = EngineStats(start_s=3.25, sync_s=[0.5, 0.75], requests=40, generated_tokens=1200)

    @flow(name="engine-artifacts-test")
    def engine_night():
        as_task(engine_metrics, "vllm", [stats.to_dict()], 6.0)  # the rollout stage's step
        ARTIFACTS["train_grpo"](ENGINE_SUMMARY)  # what the train step's result publishes

    @flow(name="hf-artifacts-test")
    def hf_night():
        ARTIFACTS["train_grpo"](HF_SUMMARY)

    return {"engine": _artifacts(engine_night(return_state=True)),
            "hf": _artifacts(hf_night(return_state=True))}


def test_the_engine_rollout_table_gives_start_syncs_requests_and_tokens_per_second(published):
    (row,) = _table(published["engine"]["engine-rollout"])
    assert row == {"engine": "vllm", "engines": 1, "start_s": 3.25, "syncs": 2,
                   "sync_s_total": 1.25, "requests": 40, "generated_tokens": 1200,
                   "tokens_per_s": 200.0}


def test_the_engine_train_table_gives_the_correction_of_the_engine_rows(published):
    (row,) = _table(published["engine"]["engine-train"])
    assert row == {"engine_rows": 8, "engine_logp_gap": 0.0123, "engine_is_truncated": 0.25,
                   "engine_is_weight_mean": 0.98}
    assert "abc123" in published["engine"]["engine-train"]["description"]


def test_a_train_step_without_engine_rows_publishes_no_engine_table(published):
    assert published["hf"] == {}
