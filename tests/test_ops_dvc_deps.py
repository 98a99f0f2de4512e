"""dvc.yaml's code deps are each stage's import closure (codeloop dvc-deps)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from codeloop.ops.dvc_deps import check, closure, write

STAGES = list(yaml.safe_load((Path(__file__).parents[1] / "dvc.yaml").read_text())["stages"])


def _without(repo_root, tmp_path, stage: str, dep: str):
    text = (repo_root / "dvc.yaml").read_text()
    doc = yaml.safe_load(text)
    assert dep in doc["stages"][stage]["deps"]
    start = text.index(f"\n  {stage}:\n")
    line = f"      - {dep}\n"
    cut = text.index(line, start)
    out = tmp_path / "dvc.yaml"
    out.write_text(text[:cut] + text[cut + len(line) :])
    return out


def test_every_stage_lists_exactly_the_repo_files_it_imports(repo_root):
    assert check(repo_root) == []


@pytest.mark.parametrize("stage", STAGES)
def test_removing_any_stage_s_config_dep_is_reported_missing(repo_root, tmp_path, stage):
    stale = _without(repo_root, tmp_path, stage, "codeloop/config/__init__.py")
    assert check(repo_root, stale) == [
        f"{stage}: imports codeloop/config/__init__.py, missing from deps"
    ]


def test_function_local_imports_are_followed(repo_root):
    # evaluate_candidate imports the policy and the critic inside its body.
    files = closure(repo_root, "flows.evaluate")
    assert {"codeloop/policy/model.py", "codeloop/rewards/critic.py"} <= files


def test_source_files_the_sandbox_ships_to_its_children_are_deps(repo_root):
    # codeloop/sandbox/pool.py reads them as text (HERE / "harness.py"), never imports them.
    files = closure(repo_root, "flows.clean")
    assert {f"codeloop/sandbox/{n}.py" for n in ("budget", "zygote", "harness")} <= files


def test_the_rollout_stage_imports_no_reward_code(repo_root):
    # So a change under codeloop/rewards/ reruns score, never rollout.
    assert not [f for f in closure(repo_root, "flows.rollout") if f.startswith("codeloop/rewards")]


def test_config_imports_nothing_of_the_domain(repo_root):
    assert closure(repo_root, "codeloop.config") == {
        "codeloop/__init__.py",
        "codeloop/config/__init__.py",
        "codeloop/config/data.py",
        "codeloop/config/evaluate.py",
        "codeloop/config/mint.py",
        "codeloop/config/policy.py",
        "codeloop/config/reward.py",
        "codeloop/config/rollout.py",
        "codeloop/config/section.py",
        "codeloop/config/train.py",
    }


def test_write_restores_a_removed_dep_and_nothing_else(repo_root, tmp_path):
    stale = _without(repo_root, tmp_path, "score", "codeloop/rewards/registry.py")
    assert write(repo_root, stale) is True
    assert stale.read_text() == (repo_root / "dvc.yaml").read_text()
