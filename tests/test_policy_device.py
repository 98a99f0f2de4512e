"""policy.device: the param validates, ``auto`` resolves to CUDA when available else the
CPU, every stage that holds the policy runs it on the resolved device (through the real
stage entry points on a tiny workspace: clean → policy_init → sft → bucket → rollout →
score → critic → train → evaluate), and a CUDA device on a machine without CUDA is an error naming
the field, from every stage and from preflight. On a GPU machine ``auto`` is CUDA, so the
same tests check the CUDA path there."""

from __future__ import annotations

import logging

import pytest
import torch
from pydantic import ValidationError

from codeloop.config import Params
from codeloop.ops.preflight import run_preflight
from codeloop.paths import Paths
from codeloop.policy.device import DeviceError, resolve_device
from codeloop.stages import bucket, clean, critic, evaluate, policy_init, rollout, score, sft, train
from tests._tiny_repo import TINY

PIPELINE = [clean, policy_init, sft, bucket, rollout, score, critic, train, evaluate]
WITH_POLICY = {"policy_init", "sft", "rollout", "train", "evaluate"}
no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")


def _name(stage) -> str:
    return stage.__name__.rsplit(".", 1)[-1]


class _Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.INFO)
        self.by_stage: dict[str, list[str]] = {}
        self.stage = ""

    def emit(self, record):
        self.by_stage.setdefault(self.stage, []).append(record.getMessage())


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    """Every stage run in-process on tiny params, with the log per stage of the modules that
    place a policy (loading: the policy module; building: codeloop.policy.init)."""
    root = tmp_path_factory.mktemp("ws")
    params = Params.model_validate({**TINY, "score": {"replay_sample": 0}})
    loggers = [
        logging.getLogger(n) for n in ("codeloop.policy.model", "codeloop.policy.init")
    ]
    handler, levels = _Records(), [lg.level for lg in loggers]
    for lg in loggers:
        lg.addHandler(handler)
        lg.setLevel(logging.INFO)
    try:
        for stage in PIPELINE:
            handler.stage = _name(stage)
            if stage is train:
                stage.run(params, Paths(root), preflight=False)  # no frozen-set workspace checks
            else:
                stage.run(params, Paths(root))
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.removeHandler(handler)
            lg.setLevel(level)
    return root, params, handler.by_stage


def test_policy_device_accepts_auto_cpu_cuda_and_cuda_n():
    for value in ("auto", "cpu", "cuda", "cuda:1"):
        assert Params.model_validate({"policy": {"device": value}}).policy.device == value


def test_policy_device_rejects_other_names_naming_the_field():
    with pytest.raises(ValidationError, match=r"policy\.device|device"):
        Params.model_validate({"policy": {"device": "gpu"}})


def test_auto_resolves_to_cuda_when_available_else_cpu():
    want = "cuda" if torch.cuda.is_available() else "cpu"
    assert resolve_device("auto").type == want
    assert resolve_device("cpu") == torch.device("cpu")


@no_cuda
def test_cuda_without_cuda_is_an_error_naming_the_field():
    for value in ("cuda", "cuda:0"):
        with pytest.raises(DeviceError, match=r"policy\.device: 'cuda(:0)?' but CUDA"):
            resolve_device(value)


@no_cuda
def test_preflight_fails_on_cuda_without_cuda_naming_the_field(tmp_path):
    params = Params.model_validate({"policy": {"device": "cuda"}})
    [check] = [c for c in run_preflight(params, str(tmp_path), run_golden=False).checks
               if c.name == "policy device"]
    assert not check.ok and "policy.device" in check.reason


def test_every_stage_with_the_policy_runs_it_on_the_resolved_device(workspace):
    _, _, logs = workspace
    want = str(resolve_device("auto"))
    for stage in WITH_POLICY:
        lines = [m for m in logs.get(stage, []) if " on " in m]
        assert lines, f"{stage}: no policy placed"
        # "on <device>" is next(model.parameters()).device after loading
        assert all(f" on {want}" in m for m in lines), (stage, lines)


def test_every_loading_stage_passes_policy_device_to_the_load(workspace):
    _, _, logs = workspace
    for stage in WITH_POLICY - {"policy_init"}:  # policy_init builds; it resolves directly
        loads = [m for m in logs[stage] if m.startswith("loaded ") and "policy.device" in m]
        assert loads and all("(policy.device auto)" in m for m in loads), (stage, loads)


def test_score_and_critic_never_load_the_policy(workspace):
    _, _, logs = workspace
    assert not logs.get("score") and not logs.get("critic")


@no_cuda
@pytest.mark.parametrize("stage", [policy_init, sft, rollout, train, evaluate], ids=_name)
def test_each_stage_refuses_cuda_without_cuda_naming_the_field(workspace, stage):
    root, params, _ = workspace
    cuda = params.model_copy(update={"policy": params.policy.model_copy(update={"device": "cuda"})})
    kw = {"preflight": False} if stage is train else {}
    with pytest.raises(DeviceError, match=r"policy\.device: 'cuda' but CUDA is not available"):
        stage.run(cuda, Paths(root), **kw)
