"""bench/sft_stability.py: its SFT is the sft stage's, and its table is the one it claims."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from codeloop.config import load_params
from codeloop.paths import Paths
from codeloop.stages import sft
from tests._tiny_repo import TINY

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.sft_stability import table, with_overrides  # noqa: E402


@pytest.mark.slow
def test_the_bench_trains_the_same_checkpoint_as_the_sft_stage(tmp_path):
    params_file = tmp_path / "params.yaml"
    params_file.write_text(yaml.safe_dump(TINY))
    out, work = tmp_path / "rows.jsonl", tmp_path / "work"
    cmd = [sys.executable, "bench/sft_stability.py", "--params", str(params_file),
           "--work", str(work), "--out", str(out), "--configs", "params.yaml",
           "--perturbations", "default", "--samples", "1", "--ema", "", "--jobs", "1"]
    subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, text=True, timeout=1800)
    row = json.loads(out.read_text().splitlines()[0])
    stats = sft.run(load_params(params_file), Paths(work / "default"))
    assert row["model_version"] == stats["model_version"]


def test_an_override_of_an_unknown_key_is_refused_with_the_key_named(repo_root):
    with pytest.raises(KeyError, match="sft.lr_flor"):
        with_overrides(load_params(repo_root / "params.yaml"), {"sft.lr_flor": 0.0})


def test_the_table_puts_the_baseline_first_with_mean_and_sd_over_perturbations():
    rows = [
        {"perturbation": p, "config": c, "pass@1": x, "eval_sd": 0.01, "sft_s": 10.0}
        for c, xs in (("a-candidate", (0.5, 0.5, 0.5)), ("old-default", (0.1, 0.5, 0.3)))
        for p, x in zip(("default", "seed1", "repos1"), xs, strict=True)
    ]
    lines = table(rows).splitlines()
    assert lines[1].split()[:4] == ["old-default", "0.300", "+-", "0.200"]
    assert lines[2].split()[:4] == ["a-candidate", "0.500", "+-", "0.000"]


def test_an_override_can_reach_into_a_list_to_set_the_generators_seed(repo_root):
    params = with_overrides(load_params(repo_root / "params.yaml"), {"clean.sources.0.seed": 4})
    assert params.clean.sources[0].seed == 4


def test_the_table_adds_the_common_set_spread_under_a_configuration_that_has_it():
    rows = [
        {"perturbation": p, "config": "params.yaml", "pass@1": x, "eval_sd": 0.01,
         "sft_s": 10.0, "common@1": c}
        for p, x, c in (("default", 0.4, 0.5), ("gen1", 0.6, 0.5))
    ]
    lines = table(rows).splitlines()
    assert lines[2].split()[:7] == ["on", "one", "common", "set", "0.500", "+-", "0.000"]


def test_the_spread_rows_give_each_sets_sd_over_the_versions():
    from bench.sft_stability import spread_rows

    rows = [{"config": "params.yaml", "pass@1": x, "common@1": c}
            for x, c in ((0.4, 0.5), (0.6, 0.5), (0.5, 0.5))]
    got = {r["set"]: r for r in spread_rows(rows)}
    assert (got["own"]["versions"], got["own"]["sd"], got["own"]["mean"]) == (3, 0.1, 0.5)
    assert got["common"]["sd"] == 0.0
