"""The bucket flow shows the stage's steps as Prefect tasks named like their functions."""

from __future__ import annotations

import asyncio

import yaml

from codeloop.data.generator import generate_tasks
from codeloop.io import write_json, write_tasks
from codeloop.paths import Paths


async def _task_run_names(flow_run_id) -> list[str]:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    async with get_client() as client:
        runs = await client.read_task_runs(
            flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id]))
        )
    return [r.name for r in runs]


def test_each_step_of_the_bucket_stage_is_a_task_named_like_its_function(tmp_path, prefect_harness):
    from flows.bucket import bucket

    paths = Paths(tmp_path)
    write_tasks(paths.clean_tasks, generate_tasks(12, seed=3, max_depth=2))
    write_json(paths.manifest, {"dataset_version": "ds"})
    (tmp_path / "params.yaml").write_text(yaml.safe_dump({"bucket": {"tasks_per_iteration": 4}}))
    state = bucket(root=str(tmp_path), return_state=True)
    assert state.is_completed()
    names = asyncio.run(_task_run_names(state.state_details.flow_run_id))
    # Prefect suffixes a run counter: "make_plan-0" is a run of the task make_plan.
    assert sorted(n.rsplit("-", 1)[0] for n in names) == ["assign_difficulty", "make_plan"]
