"""A toy DVC pipeline in a temp git repo, for tests of the nightly flow's orchestration.

Two stages stand in for the ML: ``train`` writes models/candidate/weights.txt as
``<toy.score>@<rollout.iteration>`` (so a new night number gives a new candidate; with
``TOY_CANDIDATES_LOG`` set it also appends that to the named file outside the repo; while
the file ``TOY_HANG_FILE`` names exists it touches ``<that>.started`` and stands still) and
``evaluate`` writes metrics/eval.json in the shape flows/evaluate.py writes, with
pass@1 = toy.score / 100 and model_version derived from the candidate. With
``CODELOOP_TOY_ARTIFACTS=1`` in its environment the evaluate stage also publishes the
evaluate flow's keyed artifacts through tasks.artifacts (needs a Prefect API and the repo on
PYTHONPATH), as the real stage does.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from contextlib import contextmanager
from pathlib import Path

import yaml

REPO_ROOT = Path(__file__).resolve().parents[1]

TRAIN_STAGE = textwrap.dedent(
    """
    import os, pathlib, yaml
    toy = yaml.safe_load(open("toy.yaml"))["toy"]
    it = yaml.safe_load(open("params.yaml"))["rollout"]["iteration"]
    d = pathlib.Path("models/candidate")
    d.mkdir(parents=True, exist_ok=True)
    hang = os.environ.get("TOY_HANG_FILE")
    if hang and os.path.exists(hang):  # stand still mid-stage, for a kill to land in
        open(hang + ".started", "w").close()
        import time
        time.sleep(600)
    (d / "weights.txt").write_text(f"{toy['score']}@{it}")
    if os.environ.get("TOY_CANDIDATES_LOG"):  # a probe outside the repo: every build
        with open(os.environ["TOY_CANDIDATES_LOG"], "a") as f:
            f.write(f"{toy['score']}@{it}\\n")
    """
)

EVAL_STAGE = textwrap.dedent(
    """
    import csv, json, os, pathlib, yaml
    toy = yaml.safe_load(open("toy.yaml"))["toy"]
    pathlib.Path("metrics").mkdir(exist_ok=True)
    if toy["fail"]:
        raise SystemExit("toy stage failed on purpose")
    rows = list(csv.DictReader(open("history/iterations.csv")))
    weights = pathlib.Path("models/candidate/weights.txt").read_text()
    ev = {"iteration": len(rows) + 1, "model_version": "m" + weights,
          "sets": {"heldout": {"pass@1": toy["score"] / 100, "infra_errors": 0}}}
    json.dump(ev, open("metrics/eval.json", "w"))
    if os.environ.get("CODELOOP_TOY_ARTIFACTS") == "1":
        from prefect import flow
        from tasks.artifacts import publish_eval_artifacts

        @flow(name="evaluate")
        def evaluate():
            report = {"kept": 40, "dropped": 2, "quarantined": 1}
            score = {"components": {"pass_rate": {"mean": 0.5, "std": 0.1}}}
            publish_eval_artifacts(ev, [{"iteration": ev["iteration"], "heldout": 0.5}],
                                   report, score)

        evaluate()
    """
)

SCORE_STAGE = textwrap.dedent(
    """
    import yaml
    from codeloop.io import write_trajectories
    from codeloop.schema import Trajectory, TrajectoryMetadata
    it = yaml.safe_load(open("params.yaml"))["rollout"]["iteration"]
    rows = []
    for task in range(4):
        for k in range(3):
            passed = (task + k + it) % 3 == 0
            rows.append(Trajectory(
                trajectory_id=f"n{it}-t{task}-{k}", task_id=f"task{task}",
                prompt_key=f"n{it}-t{task}", prompt="p", final_code=f"x = {k}",
                reward=1.0 if passed else 0.25 * k, iteration=it,
                terminal_reason="all_tests_passed" if passed else ("error", "max_steps")[k % 2],
                metadata=TrajectoryMetadata(reward_fn_version="v2"),
                token_ids=[1, 2, 3], loss_mask=[0, 1, 1], sample_logprobs=[0.0, -1.0, -2.0]))
    write_trajectories("data/trajectories", rows)
    """
)


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=repo, check=True, capture_output=True, text=True
    ).stdout


def _dvc(repo: Path, *args: str) -> None:
    env = {**os.environ, "DVC_NO_ANALYTICS": "1"}
    subprocess.run([sys.executable, "-m", "dvc", *args], cwd=repo, check=True, env=env)


def dvc_run(repo: Path, *args: str) -> subprocess.CompletedProcess:
    """A dvc command in repo whose outcome the test reads (not checked, output captured)."""
    env = {**os.environ, "DVC_NO_ANALYTICS": "1"}
    return subprocess.run(
        [sys.executable, "-m", "dvc", *args], cwd=repo, env=env, capture_output=True, text=True
    )


def make_toy_repo(root: Path) -> Path:
    """root/repo: a committed git + dvc repo with the toy stages; root/remote its remote."""
    repo = root / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "train_stage.py").write_text(TRAIN_STAGE)
    (repo / "eval_stage.py").write_text(EVAL_STAGE)
    (repo / "params.yaml").write_text(
        "policy:\n  model: embedded\n  checkpoint: models/init  # promoted nightly\n"
        "rollout:\n  seed: 0\n  iteration: 0  # bumped nightly\n"
        "evaluate:\n  gate_tolerance: 0.02\n"
    )
    (repo / "toy.yaml").write_text("toy:\n  score: 50\n  fail: false\n")
    stages = {
        "train": {
            "cmd": "python train_stage.py",
            "deps": ["train_stage.py"],
            "params": ["rollout.iteration", {"toy.yaml": ["toy.score"]}],
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
    _dvc(repo, "init", "-q")
    # What `dvc remote add -d local <dir>` writes, without paying another dvc start-up.
    with open(repo / ".dvc/config", "a") as f:
        f.write(f"[core]\n    remote = local\n['remote \"local\"']\n    url = {root / 'remote'}\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "toy pipeline")
    return repo


def add_score_stage(repo: Path) -> None:
    """Add a ``score`` stage writing 12 scored trajectories per night to data/trajectories
    (iteration = rollout.iteration, codeloop.io), with retention on, and commit it."""
    (repo / "score_stage.py").write_text(SCORE_STAGE)
    dvc_yaml = yaml.safe_load((repo / "dvc.yaml").read_text())
    dvc_yaml["stages"]["score"] = {
        "cmd": "python score_stage.py",
        "deps": ["score_stage.py"],
        "params": ["rollout.iteration"],
        "outs": ["data/trajectories"],
    }
    (repo / "dvc.yaml").write_text(yaml.safe_dump(dvc_yaml))
    with open(repo / "params.yaml", "a") as f:
        f.write("retention:\n  sample_per_stratum: 1\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "toy score stage")


def set_toy(repo: Path, **kw) -> None:
    """Change toy.yaml and commit it (the nightly flow wants a clean workspace)."""
    p = yaml.safe_load((repo / "toy.yaml").read_text())
    p["toy"].update(kw)
    (repo / "toy.yaml").write_text(yaml.safe_dump(p))
    git(repo, "commit", "-qam", f"toy {kw}")


@contextmanager
def stage_env():
    """PATH with this venv's bin (dvc, python) and PYTHONPATH at the repo (the score stage
    imports codeloop) for the block; both restored after."""
    old_path, old_pp = os.environ["PATH"], os.environ.get("PYTHONPATH")
    os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{old_path}"
    os.environ["PYTHONPATH"] = str(REPO_ROOT)
    try:
        yield
    finally:
        os.environ["PATH"] = old_path
        if old_pp is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old_pp
