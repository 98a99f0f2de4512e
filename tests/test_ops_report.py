"""`codeloop report` on files written by the real pipeline machinery: the toy DVC
pipeline's stages, the real nightly flow's promotion (history/iterations.csv), and
`dvc repro` (real git, real dvc, real Prefect). The full pipeline's per-stage headlines
are checked on the real tiny run in tests/test_pipeline_e2e.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from codeloop.ops.report import build_report, render
from tests._toy_pipeline import REPO_ROOT, git, make_toy_repo, set_toy, stage_env

pytestmark = pytest.mark.slow


def _dvc_repro(repo: Path) -> None:
    """`dvc repro` in repo, under the caller's stage_env (its stages say `python`)."""
    subprocess.run([sys.executable, "-m", "dvc", "repro"], cwd=repo, check=True,
                   capture_output=True)


@pytest.fixture(scope="module")
def reports(tmp_path_factory, prefect_harness) -> dict:
    """Reports at three points: before any promotion, right after a promoting night,
    and after a later `dvc repro` that scored higher (pass@1 0.5 -> 0.6)."""
    from flows.nightly import nightly

    repo = make_toy_repo(tmp_path_factory.mktemp("report"))
    with stage_env():
        _dvc_repro(repo)
        out = {"unpromoted": build_report(repo)}
        git(repo, "checkout", "--", ".")
        nightly(repo=str(repo), pull=False)
        out["promoted"] = build_report(repo)
        set_toy(repo, score=60)
        _dvc_repro(repo)
        out["later"] = build_report(repo)
    cli = subprocess.run([sys.executable, "-m", "codeloop.cli", "report", "--root", str(repo)],
                         cwd=REPO_ROOT, capture_output=True, text=True, check=True)
    out["cli_text"] = cli.stdout
    out["repo"] = repo
    return out


def test_before_any_promotion_the_report_says_so(reports):
    assert reports["unpromoted"]["since_promoted"] == {
        "baseline": None,
        "note": "no promoted iteration yet",
    }


def test_right_after_a_promoting_night_the_report_names_its_tag(reports):
    note = reports["promoted"]["since_promoted"]["note"]
    assert note.startswith("this iteration was promoted as iter-0001;")


def test_the_report_compares_pass_at_1_with_the_last_promoted_iteration(reports):
    changes = {c["what"]: c for c in reports["later"]["since_promoted"]["changes"]}
    heldout = changes["pass@1 heldout"]
    assert (heldout["before"], heldout["now"]) == (0.5, 0.6)


def test_the_report_names_the_promoted_iteration_it_compares_with(reports):
    assert reports["later"]["since_promoted"]["baseline"] == {"tag": "iter-0001", "iteration": 1}


def test_the_evaluate_headline_is_what_metrics_eval_json_holds(reports):
    ev = json.loads((reports["repo"] / "metrics/eval.json").read_text())
    headline = reports["later"]["stages"]["evaluate"]
    assert headline["sets"]["heldout"]["pass@1"] == ev["sets"]["heldout"]["pass@1"]


def test_a_stage_without_a_metrics_file_is_reported_as_not_run(reports):
    assert reports["later"]["stages"]["clean"] is None
    assert "clean     not run" in render(reports["later"])


def test_the_report_command_prints_the_change_since_promotion(reports):
    assert "pass@1 heldout" in reports["cli_text"]
    assert "0.500 -> 0.600 (+0.100)" in reports["cli_text"]


def test_an_unreadable_metrics_file_stops_the_report_naming_it(tmp_path):
    (tmp_path / "metrics").mkdir()
    (tmp_path / "metrics/train.json").write_text("{not json")
    with pytest.raises(ValueError, match=r"metrics/train.json: not valid JSON"):
        build_report(tmp_path)
