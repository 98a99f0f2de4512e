"""scripts/gpu_check.sh's code path, run on CPU with tiny sizes (--cpu-smoke): every figure
the GPU run reports comes out, finite and positive, in the JSON it writes; the engine's
part runs where vLLM is installed and says why it skipped where it is not."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from codeloop.policy.vllm_engine import engine_missing

pytest.importorskip("trl", reason="trl (dev dependency) is not installed")
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def figures(tmp_path_factory, repo_root):
    out = tmp_path_factory.mktemp("gpu") / "gpu_check.json"
    subprocess.run(
        ["bash", "scripts/gpu_check.sh", "--cpu-smoke", "--out", str(out)],
        cwd=repo_root, check=True, capture_output=True, text=True, timeout=900,
        env={**os.environ, "PYTHON": sys.executable},
    )
    return json.loads(Path(out).read_text())


def test_the_smoke_run_reports_rollout_step_and_trl_figures_for_full_lora_and_qlora(figures):
    keys = [
        figures["rollout"]["codeloop_tokens_per_s"],
        figures["rollout"]["ratio_codeloop_over_plain"],
        *(figures[f"codeloop_step_{k}"]["seconds"] for k in ("full", "lora", "qlora")),
        *(figures[f"codeloop_step_{k}"]["peak_mem_mb"] for k in ("full", "lora", "qlora")),
        *(figures[f"ratio_trl_over_codeloop_{k}"] for k in ("full", "lora")),
    ]
    assert all(math.isfinite(v) and v > 0 for v in keys)


def test_the_smoke_run_reports_the_engines_rollout_and_weight_sync(figures):
    if engine_missing():
        assert "setup.sh --vllm" in figures["engine"]["skipped"]
        return
    eng = figures["engine"]
    keys = [eng[k] for k in ("hf_tokens_per_s", "vllm_tokens_per_s", "ratio_vllm_over_hf",
                             "engine_start_s", "weight_sync_s")]
    assert all(math.isfinite(v) and v > 0 for v in keys)
    assert eng["tokens_after_sync"] > 0  # the engine still serves after the sync


def test_the_smoke_run_times_every_part(figures):
    parts = ["rollout", "codeloop_step_full", "trl_step_full", "codeloop_step_lora",
             "trl_step_lora", "codeloop_step_qlora", "engine"]
    assert list(figures["timings"]) == parts
