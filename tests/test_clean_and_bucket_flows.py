"""The clean and bucket flows run for real under Prefect on tiny params."""

from __future__ import annotations

import json

import yaml

from codeloop.io import read_json, read_tasks
from codeloop.paths import Paths


def test_clean_then_bucket_flows_write_their_outputs(tmp_path, prefect_harness):
    from flows.bucket import bucket
    from flows.clean import clean

    params = {
        "clean": {
            "sources": [{"kind": "synthetic", "n": 40, "seed": 1}],
            "verify_runs": 1,
            "repo_tasks": {"enabled": False},
        },
        "bucket": {"tasks_per_iteration": 8},
        "sandbox": {"backend": "local"},
    }
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    (tmp_path / "history").mkdir()
    (tmp_path / "history" / "pass_rates.json").write_text(json.dumps({}))
    report = clean(root=str(tmp_path))
    assert report["balanced"] and (Paths(tmp_path).frozen_dir / "humaneval.parquet").exists()
    assert read_json(Paths(tmp_path).metrics("clean"))["kept_train"] == report["kept_train"]
    plan = bucket(root=str(tmp_path))
    assert len(plan["task_ids"]) == 8
    assert plan["dataset_version"] == report["dataset_version"]
    assert len(read_tasks(Paths(tmp_path).bucket_tasks)) == report["kept_train"]
