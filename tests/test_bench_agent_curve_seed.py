"""bench/agent_curve.py's held-out stream: another seed is allowed, the training seed is not."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_a_heldout_seed_equal_to_the_training_seed_is_refused_before_any_work(tmp_path):
    out = tmp_path / "c.csv"
    res = subprocess.run(
        [sys.executable, "bench/agent_curve.py", "--heldout-seed", "0", "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )
    assert res.returncode != 0
    assert "--heldout-seed 0 is the training repositories' seed" in res.stderr
    assert not out.exists()
