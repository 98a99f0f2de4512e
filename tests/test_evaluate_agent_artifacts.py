"""The Prefect UI's view of agent episodes (tasks/artifacts.publish_agent_artifacts): the
tool-call mix table and one episode step by step, read back from a real Prefect server."""

from __future__ import annotations

import json

import pytest

from codeloop.evaluate.agent_metrics import agent_summary
from codeloop.schema import Action, Observation, Trajectory
from tests._prefect_api import post


def _traj(tid: str) -> Trajectory:
    acts = [
        Action(0, "tool", "", Observation(output="1 failed", status="failed"), tool="run_tests",
               raw="run_tests"),
        Action(1, "tool", "", Observation(output="error: no_match", error_kind="no_match"),
               tool="edit", raw="edit path=a.py"),
        Action(2, "tool", "", Observation(output="submitted"), tool="submit", raw="submit"),
    ]
    return Trajectory(tid, "repo/1", "k", "p", actions=acts, terminal_reason="submitted",
                      final_diff="diff --git a/a.py b/a.py\n", tool_calls=3, tool_errors=1)


@pytest.fixture(scope="module")
def published(prefect_harness):
    from prefect import flow
    from prefect.settings import PREFECT_API_URL

    from tasks.artifacts import publish_agent_artifacts

    summary = agent_summary([_traj("a"), _traj("b")], iteration=7, resolved=[True, False])

    @flow(name="agent-artifacts-test")
    def publish():
        publish_agent_artifacts(summary, prefix="agent-eval")

    run_id = str(publish(return_state=True).state_details.flow_run_id)
    api = PREFECT_API_URL.value()
    # this run's artifacts only: other tests of the session publish under the same keys
    body = {"artifacts": {"key": {"any_": ["agent-eval-tool-mix", "agent-eval-episode"]},
                          "flow_run_id": {"any_": [run_id]}}}
    found = post(api, "/artifacts/filter", body)
    assert len(found) == 2, found
    return {a["key"]: a for a in found}


def test_agent_artifacts_tool_mix_lists_every_tool_with_its_errors(published):
    table = published["agent-eval-tool-mix"]["data"]
    rows = {r["tool"]: r for r in (table if isinstance(table, list) else json.loads(table))}
    assert (
        rows["edit"]["calls"] == 2 and rows["edit"]["errors"] == 2 and rows["submit"]["calls"] == 2
    )


def test_agent_artifacts_tool_mix_description_gives_the_resolved_rate(published):
    assert "resolved rate 0.5000" in published["agent-eval-tool-mix"]["description"]


def test_agent_artifacts_episode_is_rendered_step_by_step(published):
    md = published["agent-eval-episode"]["data"]
    assert (
        md.index("step 0: `run_tests`") < md.index("step 1: `edit`") < md.index("step 2: `submit`")
    )
