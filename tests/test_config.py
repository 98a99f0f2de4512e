"""params.yaml validation: good files load, bad values name their key."""

from __future__ import annotations

import pytest
import yaml

from codeloop.config import ConfigError, field_docs, load_params, parse_params


def test_an_empty_params_file_gives_the_shipped_params(repo_root, tmp_path):
    # One source of defaults: the models' defaults are what params.yaml ships, so bench/,
    # parse_params({}) and `dvc repro` run the same setup.
    empty = tmp_path / "params.yaml"
    empty.write_text("")
    assert load_params(empty) == load_params(repo_root / "params.yaml")


def test_an_unknown_reward_version_names_the_key_and_the_known_ones():
    with pytest.raises(ConfigError) as err:
        parse_params({"reward": {"version": "v9"}})
    assert "reward.version" in str(err.value) and "v2-critic" in str(err.value)


def test_the_repository_params_file_is_valid(repo_root):
    params = load_params(repo_root / "params.yaml")
    assert params.rollout.samples_per_task >= 1


def test_a_negative_temperature_names_its_key_and_the_bound():
    with pytest.raises(ConfigError) as err:
        parse_params({"rollout": {"temperature": -1}})
    assert "rollout.temperature" in str(err.value)
    assert "greater than 0" in str(err.value)


def test_an_unknown_key_lists_the_allowed_keys():
    with pytest.raises(ConfigError) as err:
        parse_params({"train": {"learning_rate": 0.1}})
    message = str(err.value)
    assert "train.learning_rate: unknown key" in message
    assert "lr" in message


def test_a_wrong_type_is_reported_with_the_value_given():
    with pytest.raises(ConfigError) as err:
        parse_params({"rollout": {"max_steps": "many"}})
    assert "rollout.max_steps" in str(err.value)
    assert "'many'" in str(err.value)


def test_a_loss_type_outside_the_choices_lists_the_choices():
    with pytest.raises(ConfigError) as err:
        parse_params({"train": {"loss_type": "ppo"}})
    assert "train.loss_type" in str(err.value)
    assert "dapo" in str(err.value)


def test_a_missing_params_file_is_named(tmp_path):
    with pytest.raises(ConfigError, match="nope.yaml"):
        load_params(tmp_path / "nope.yaml")


def test_a_params_file_that_is_not_a_mapping_is_refused(tmp_path):
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump([1, 2]))
    with pytest.raises(ConfigError, match="mapping"):
        load_params(path)


def test_every_params_key_has_a_description():
    undocumented = [key for key, doc in field_docs().items() if not doc]
    assert undocumented == []
