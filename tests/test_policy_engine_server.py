"""policy.engine_url: a running vLLM OpenAI-compatible server (vLLM's CPU backend here)
samples episodes for codeloop, token ids in and out, and takes weight syncs
(codeloop.policy.vllm_engine.ServerVllm). The server is a tiny Qwen2 chat model whose
output head is tied to its embeddings, started as a user would start it."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from types import SimpleNamespace

import pytest
import torch

from codeloop.config import RolloutConfig, SandboxConfig
from codeloop.data.generator import generate_tasks
from codeloop.policy.engine import EngineSettings, SamplingSpec
from codeloop.policy.engine_policy import checkpoint_identity, open_engine_policy
from codeloop.policy.model import Policy
from codeloop.policy.tiny import save_tiny
from codeloop.policy.vllm_engine import engine_python
from codeloop.rollout.context import EpisodeContext
from codeloop.rollout.envs import run_episodes
from codeloop.sandbox import make_executor
from tests._engine import require_engine

# head size 32 (vLLM's CPU attention needs >= 32); initializer_range 0.2: peaked enough
# that what a model samples depends on its weights, not only on the seed's noise
SHAPE = dict(hidden_size=128, num_attention_heads=4, num_key_value_heads=2,
             initializer_range=0.2)
START_TIMEOUT_S = 300.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as resp:
        return json.loads(resp.read().decode() or "{}")


def _wait_healthy(url: str, proc: subprocess.Popen, log_path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = log_path.read_text(errors="replace")[-3000:]
            pytest.fail(f"the vLLM server exited ({proc.returncode}):\n{tail}")
        try:
            with urllib.request.urlopen(url + "/health", timeout=5) as resp:
                if resp.status == 200:
                    return
        except OSError:
            pass
        time.sleep(1.0)
    tail = log_path.read_text(errors="replace")[-3000:]
    pytest.fail(f"the vLLM server was not healthy within {START_TIMEOUT_S:.0f}s:\n{tail}")


@pytest.fixture(scope="module")
def server(tmp_path_factory, repo_root):
    """`vllm serve` on checkpoint a (the CPU wheel's module entry point: its `vllm`
    command cannot read its own version), with codeloop's worker extension."""
    require_engine()
    root = tmp_path_factory.mktemp("server")
    a = save_tiny(root / "a", "qwen2", seed=0, **SHAPE)
    b = save_tiny(root / "b", "qwen2", seed=1, **SHAPE)
    port = _free_port()
    env = {**os.environ, "VLLM_SERVER_DEV_MODE": "1", "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True",
           "VLLM_CPU_KVCACHE_SPACE": "1", "PYTHONPATH": str(repo_root)}
    cmd = [engine_python(), "-m", "vllm.entrypoints.openai.api_server", "--model", str(a),
           "--port", str(port), "--generation-config", "vllm",
           "--logprobs-mode", "raw_logprobs", "--dtype", "float32", "--enforce-eager",
           "--no-enable-chunked-prefill", "--max-num-batched-tokens", "4096",
           "--worker-extension-cls", "codeloop.policy.vllm_worker.WeightSync"]
    log_path = root / "server.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(url, proc, log_path)
        yield SimpleNamespace(url=url, a=a, b=b, log=log_path)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)  # its own session: the server's engine too
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


@pytest.fixture(scope="module")
def engine(server):
    policy = open_engine_policy(server.a, EngineSettings(url=server.url, seed=0))
    yield policy
    policy.close()


@pytest.fixture(scope="module")
def executor():
    ex = make_executor(SandboxConfig(workers=2, timeout_s=30.0))
    yield ex
    ex.close()


TASKS = generate_tasks(3, seed=3, max_depth=1)


def _rollout(engine, executor, **kw):
    cfg = RolloutConfig(**{**dict(samples_per_task=2, max_steps=2, temperature=1.0, top_p=1.0,
                                  max_new_tokens=24, seed=3), **kw})
    return run_episodes(TASKS, engine, executor, EpisodeContext(cfg, "dv-server", 1, 10.0))


@pytest.fixture(scope="module")
def rows(engine, executor):
    return _rollout(engine, executor)


def _hf_logps(path, ids: list[int]) -> list[float]:
    model = Policy.load(path).model
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0, :-1].float()
    lp = torch.log_softmax(logits, -1).gather(-1, torch.tensor(ids[1:]).unsqueeze(-1))
    return [0.0, *lp.squeeze(-1).tolist()]


def test_a_server_started_on_the_checkpoint_is_given_its_version_without_a_reload(server,
                                                                                 engine):
    assert _get(server.url + "/weight_info")["weight_version"] == engine.model_version
    assert engine.stats.sync_s == []


def test_server_episodes_come_back_in_the_trainers_token_layout(rows):
    assert [t.task_id for t in rows] == [t.task_id for t in TASKS for _ in range(2)]
    assert not [t.infra_error for t in rows if t.infra_error]
    assert {t.metadata.engine for t in rows} == {"vllm"}
    for t in rows:
        gen = [i for i, m in enumerate(t.loss_mask) if m]
        assert len(t.token_ids) == len(t.loss_mask) == len(t.sample_logprobs)
        assert gen and all(t.sample_logprobs[i] < 0.0 for i in gen)
        assert all(t.sample_logprobs[i] == 0.0 for i, m in enumerate(t.loss_mask) if not m)


def test_server_log_probs_agree_with_a_cpu_forward_pass(server, rows):
    gaps = []
    for t in rows[:3]:
        ref = _hf_logps(server.a, t.token_ids)
        gaps += [abs(ref[i] - t.sample_logprobs[i]) for i, m in enumerate(t.loss_mask) if m]
    assert gaps and max(gaps) < 1e-3  # float32 on both sides: rounding only


def test_the_server_gives_the_same_episodes_for_the_same_seeds(engine, executor, rows):
    again = _rollout(engine, executor)
    assert [t.token_ids for t in again] == [t.token_ids for t in rows]


def test_a_sync_to_another_checkpoint_changes_the_samples_and_is_recorded(server, engine,
                                                                         rows):
    probe = rows[0].token_ids[:30]
    spec = SamplingSpec(1.0, 1.0, 1.0, 16)
    before = engine.sample_rows([probe] * 4, [1, 2, 3, 4], spec)
    engine.sync(server.b)
    try:
        after = engine.sample_rows([probe] * 4, [1, 2, 3, 4], spec)
        version = checkpoint_identity(server.b)[1]
        assert engine.model_version == version and len(engine.stats.sync_s) == 1
        assert _get(server.url + "/weight_info")["weight_version"] == version
        assert [g.token_ids for g in after] != [g.token_ids for g in before]
        # b's weights everywhere, its output head (tied to the embeddings) included
        ref = _hf_logps(server.b, probe + after[0].token_ids)[len(probe):]
        assert max(abs(x - y) for x, y in zip(ref, after[0].logprobs, strict=True)) < 1e-3
    finally:
        engine.sync(server.a)
    back = engine.sample_rows([probe] * 4, [1, 2, 3, 4], spec)
    assert [g.token_ids for g in back] == [g.token_ids for g in before]
