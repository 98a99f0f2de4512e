"""The nightly run orders dvc.yaml's stages by their data, not by a fixed list."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from flows.nightly import stage_order


def _repo(tmp_path: Path, stages: dict) -> Path:
    (tmp_path / "dvc.yaml").write_text(yaml.safe_dump({"stages": stages}))
    (tmp_path / "params.yaml").write_text("policy:\n  checkpoint: models/init\n")
    return tmp_path


def test_a_stage_runs_after_the_stage_whose_outputs_it_reads(tmp_path):
    repo = _repo(
        tmp_path,
        {
            "evaluate": {"cmd": "x", "deps": ["models/candidate"]},
            "train": {"cmd": "x", "deps": ["data/extra/file.txt"], "outs": ["models/candidate"]},
            "extra": {"cmd": "x", "outs": ["data/extra"]},
        },
    )
    assert stage_order(repo) == ["extra", "train", "evaluate"]


def test_a_templated_dependency_is_resolved_from_params(tmp_path):
    repo = _repo(
        tmp_path,
        {
            "rollout": {"cmd": "x", "deps": ["${policy.checkpoint}"], "outs": ["data/rollouts"]},
            "sft": {"cmd": "x", "outs": ["models/init"]},
        },
    )
    assert stage_order(repo) == ["sft", "rollout"]


def test_a_dependency_cycle_is_refused_with_the_stages_named(tmp_path):
    repo = _repo(
        tmp_path,
        {
            "a": {"cmd": "x", "deps": ["b.out"], "outs": ["a.out"]},
            "b": {"cmd": "x", "deps": ["a.out"], "outs": ["b.out"]},
        },
    )
    with pytest.raises(ValueError, match="cycle"):
        stage_order(repo)


def test_the_repository_pipeline_runs_sft_before_rollout(repo_root):
    order = stage_order(repo_root)
    if "sft" not in order:
        pytest.skip("dvc.yaml has no sft stage")
    assert order.index("sft") < order.index("rollout") < order.index("score")
