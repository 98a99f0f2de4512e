"""Real architectures end to end: `policy.model: <tiny Qwen2 / Llama dir>` -> `dvc repro`.

Each family gets one module-scoped run (a temp git+dvc copy of the repo on tiny params,
the model and its chat tokenizer built offline by `codeloop.policy.tiny`), then the
candidate is promoted as the nightly does and reloaded. Each test checks one property.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from codeloop.io import read_trajectories
from codeloop.ops.promote import promote
from codeloop.paths import Paths
from codeloop.policy.formats import CHAT_VERSION
from codeloop.policy.model import Policy
from codeloop.policy.tiny import save_tiny
from tests._tiny_repo import TINY, copy_repo, git, merge

pytestmark = pytest.mark.slow

FAMILY_PARAMS = {
    "sft": {"steps": 30, "batch_size": 8, "max_len": 384, "lr": 0.003},
    "rollout": {"samples_per_task": 2, "max_steps": 2, "max_new_tokens": 32, "batch_size": 16},
    "evaluate": {"max_tasks_per_set": 3, "max_new_tokens": 32},
}


def _dvc(cwd: Path, *args: str) -> None:
    env = dict(os.environ)
    from prefect.settings import PREFECT_API_URL

    if PREFECT_API_URL.value():
        env["PREFECT_API_URL"] = PREFECT_API_URL.value()
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    proc = subprocess.run(
        [sys.executable, "-m", "dvc", *args], cwd=cwd, env=env,
        capture_output=True, text=True, timeout=1500,
    )
    if proc.returncode != 0:
        raise AssertionError(f"dvc {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}")


@pytest.fixture(scope="module", params=["qwen2", "llama"])
def family_run(request, tmp_path_factory, repo_root, prefect_harness):
    family = request.param
    model_dir = save_tiny(tmp_path_factory.mktemp(f"tiny-{family}"), family)
    work = tmp_path_factory.mktemp("repo")
    copy_repo(repo_root, work)
    params = merge(merge(yaml.safe_load((work / "params.yaml").read_text()), TINY), FAMILY_PARAMS)
    params["policy"]["model"] = str(model_dir)
    (work / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    git(work, "init", "-q")
    git(work, "add", "-A")
    git(work, "commit", "-qm", "tiny")
    _dvc(work, "repro")
    trajs = read_trajectories(Paths(work).trajectories_dir)
    promote(work, 1, {"iteration": 1}, {})
    return family, work, trajs


def test_every_row_was_prompted_through_the_chat_template(family_run):
    family, _, trajs = family_run
    opener = "<|im_start|>user" if family == "qwen2" else "<|start_header_id|>user"
    assert trajs and all(t.metadata.prompt_template_version == CHAT_VERSION for t in trajs)
    assert all(opener in t.prompt for t in trajs)


def test_some_generation_stopped_at_the_end_of_turn_token(family_run):
    _, work, trajs = family_run
    policy = Policy.load(Paths(work).init_model)
    stops = set(policy.stop_ids())
    ends = [
        t.token_ids[i]
        for t in trajs
        for i in range(1, len(t.token_ids))
        if t.loss_mask[i] == 1 and (i + 1 == len(t.token_ids) or t.loss_mask[i + 1] == 0)
    ]
    assert any(tok in stops for tok in ends)


def test_the_candidate_was_trained_and_evaluated(family_run):
    _, work, _ = family_run
    paths = Paths(work)
    assert (paths.candidate_model / "model_version.txt").exists()
    assert paths.metrics("evaluate").exists()


def test_the_promoted_checkpoint_reloads_and_samples(family_run):
    _, work, trajs = family_run
    policy = Policy.load(work / "models" / "iter-0001")
    [[gen]] = policy.generate([trajs[0].token_ids[:8]], max_new_tokens=4, seed=1)
    assert gen.token_ids
