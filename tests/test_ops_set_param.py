"""set_param edits one params.yaml scalar in place, keeping every comment."""

from __future__ import annotations

import pytest

from codeloop.ops.promote import set_param

PARAMS = """\
policy:
  checkpoint: models/init  # promoted nightly
train:                     # full-batch steps
  steps: 2                 # two a night
  lr: 0.0002
  rft_lr: 0.0001
"""


def test_a_key_under_a_section_line_with_a_comment_is_set(tmp_path):
    path = tmp_path / "params.yaml"
    path.write_text(PARAMS)
    assert set_param(path, "train", "lr", "0.5") == "0.0002"
    assert "  lr: 0.5\n" in path.read_text() and "rft_lr: 0.0001" in path.read_text()


def test_comments_and_other_keys_survive_the_edit(tmp_path):
    path = tmp_path / "params.yaml"
    path.write_text(PARAMS)
    set_param(path, "policy", "checkpoint", "models/iter-0001")
    assert path.read_text() == PARAMS.replace("models/init", "models/iter-0001")


def test_a_missing_key_is_an_error_naming_it(tmp_path):
    path = tmp_path / "params.yaml"
    path.write_text(PARAMS)
    with pytest.raises(ValueError, match="no train.beta key"):
        set_param(path, "train", "beta", "1")
