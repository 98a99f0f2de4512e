"""The nightly flow's mechanics on a toy DVC pipeline: real git, real dvc, real Prefect.

The toy stages stand in for the ML (they write a candidate and metrics/eval.json in
the shape flows/evaluate.py writes); what is tested is the orchestration itself:
promotion, tag, history, lock, and that a refused or failed night changes nothing.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from codeloop.history import read_iterations
from codeloop.rollback import WorkspaceError, workspace_lock

pytestmark = pytest.mark.slow

EVAL_STAGE = textwrap.dedent(
    """
    import json, pathlib, yaml
    p = yaml.safe_load(open("toy.yaml"))
    pathlib.Path("metrics").mkdir(exist_ok=True)
    if p["toy"]["fail"]:
        raise SystemExit("toy stage failed on purpose")
    it = 1 + sum(1 for _ in open("history/iterations.csv")) - 1 if pathlib.Path(
        "history/iterations.csv").read_text().strip() else 1
    json.dump({"iteration": it, "model_version": "m%d" % p["toy"]["score"] ,
               "sets": {"heldout": {"pass@1": p["toy"]["score"] / 100, "infra_errors": 0}}},
              open("metrics/eval.json", "w"))
    """
)
TRAIN_STAGE = (
    "import pathlib, yaml; p = yaml.safe_load(open('toy.yaml')); "
    "d = pathlib.Path('models/candidate'); d.mkdir(parents=True, exist_ok=True); "
    "(d / 'weights.txt').write_text(str(p['toy']['score']))"
)


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=repo, check=True, capture_output=True, text=True
    ).stdout


@pytest.fixture()
def toy_repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    (repo / "train_stage.py").write_text(TRAIN_STAGE)
    (repo / "eval_stage.py").write_text(EVAL_STAGE)
    (repo / "params.yaml").write_text(
        "policy:\n  model: embedded\n  checkpoint: models/init  # promoted nightly\n"
        "evaluate:\n  gate_tolerance: 0.02\n"
    )
    (repo / "toy.yaml").write_text("toy:\n  score: 50\n  fail: false\n")
    stages = {
        "train": {
            "cmd": "python train_stage.py",
            "deps": ["train_stage.py"],
            "params": [{"toy.yaml": ["toy.score"]}],
            "outs": ["models/candidate"],
        },
        "evaluate": {
            "cmd": "python eval_stage.py",
            "deps": ["eval_stage.py", "models/candidate"],
            "params": [{"toy.yaml": ["toy"]}],
            "metrics": [{"metrics/eval.json": {"cache": False}}],
        },
    }
    (repo / "dvc.yaml").write_text(yaml.safe_dump({"stages": stages}))
    (repo / "history").mkdir()
    (repo / "history/iterations.csv").write_text("")
    (repo / "history/pass_rates.json").write_text("{}\n")
    subprocess.run([sys.executable, "-m", "dvc", "init", "-q"], cwd=repo, check=True)
    remote = tmp_path / "remote"
    subprocess.run(
        [sys.executable, "-m", "dvc", "remote", "add", "-d", "local", str(remote)],
        cwd=repo,
        check=True,
    )
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "toy pipeline")
    return repo


def _set_toy(repo: Path, **kw) -> None:
    p = yaml.safe_load((repo / "toy.yaml").read_text())
    p["toy"].update(kw)
    (repo / "toy.yaml").write_text(yaml.safe_dump(p))
    _git(repo, "commit", "-qam", f"toy {kw}")


@pytest.fixture()
def run_nightly(prefect_harness, monkeypatch):
    import sys

    from flows.nightly import nightly

    # dvc.yaml says `python`: the venv's interpreter must come first on PATH.
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}:{__import__('os').environ['PATH']}")
    return lambda repo, **kw: nightly(repo=str(repo), pull=False, **kw)


def test_a_passing_night_promotes_tags_and_records_history(toy_repo, run_nightly):
    out = run_nightly(toy_repo)
    assert out["promoted"] and out["tag"] == "iter-0001"
    assert "iter-0001" in _git(toy_repo, "tag")
    assert (toy_repo / "models/iter-0001.dvc").exists()
    assert "checkpoint: models/iter-0001" in (toy_repo / "params.yaml").read_text()
    assert read_iterations(toy_repo / "history/iterations.csv")[0]["pass_at_1"] == {"heldout": 0.5}
    assert _git(toy_repo, "status", "--porcelain", "--untracked-files=no") == ""
    assert any((toy_repo.parent / "remote").rglob("*"))  # dvc push reached the remote


def test_a_refused_night_leaves_the_last_good_iteration_untouched(toy_repo, run_nightly):
    run_nightly(toy_repo)
    head = _git(toy_repo, "rev-parse", "HEAD")
    _set_toy(toy_repo, score=10)  # pass@1 0.5 -> 0.1: beyond tolerance
    head = _git(toy_repo, "rev-parse", "HEAD")
    out = run_nightly(toy_repo)
    assert not out["promoted"] and "heldout" in out["decision"]["reasons"][0]
    assert _git(toy_repo, "rev-parse", "HEAD") == head
    assert "iter-0002" not in _git(toy_repo, "tag")
    assert _git(toy_repo, "status", "--porcelain", "--untracked-files=no") == ""
    assert (toy_repo / "models/candidate/weights.txt").read_text() == "50"  # data restored


def test_a_failing_stage_fails_the_run_and_promotes_nothing(toy_repo, run_nightly):
    _set_toy(toy_repo, fail=True)
    with pytest.raises(Exception, match="evaluate"):
        run_nightly(toy_repo)
    assert _git(toy_repo, "tag") == ""
    assert _git(toy_repo, "status", "--porcelain", "--untracked-files=no") == ""


def test_a_second_run_on_a_locked_workspace_is_refused(toy_repo):
    with workspace_lock(toy_repo), pytest.raises(WorkspaceError, match="another run"):
        with workspace_lock(toy_repo):
            pass


def test_nightly_refuses_a_workspace_with_uncommitted_changes(toy_repo, run_nightly):
    (toy_repo / "params.yaml").write_text((toy_repo / "params.yaml").read_text() + "\n# edit\n")
    with pytest.raises(WorkspaceError, match="uncommitted"):
        run_nightly(toy_repo)
