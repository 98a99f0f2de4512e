"""The vLLM engine process that ``policy.engine: vllm`` starts beside a stage.

Run as a script under the engine's interpreter (``codeloop.policy.vllm_engine`` finds it:
vLLM pins its own transformers, so it usually lives in a venv of its own). It imports
only the standard library until it is started, then vLLM: it never imports codeloop.

Protocol: one JSON object per line. The first line on stdin starts the engine
(``{"op": "start", "llm": {...LLM keyword arguments}, "sleep": bool}``) and the process
answers ``{"op": "ready", ...}`` or ``{"op": "error", "error": ...}`` and exits. Then:

- ``{"op": "gen", "id", "ids", "seed", "temperature", "top_p", "repetition_penalty",
  "max_tokens", "stop_ids", "stop", "lora"}`` adds a request; its answer
  ``{"op": "out", "id", "ids", "logps", "finish"}`` comes when it finishes, whatever was
  submitted after it (continuous batching: requests join the running batch as they come).
- ``{"op": "sync", "id", "path"}`` reloads the full weights from a checkpoint directory
  in place once every running request has finished (on a CPU a head tied to the
  embeddings is re-packed after it: ``refresh_tied_heads``); ``{"op": "synced", "id",
  "seconds"}``.
- ``{"op": "sleep"|"wake", "id"}`` frees / takes back the device memory (GPU sleep mode);
  ``{"op": "done", "id"}``.
- ``{"op": "close"}`` or end of stdin ends the process.

Any failure of one request is answered ``{"op": "error", "id", "error"}``; a failure of
the engine itself ends the process after saying so. Replies go to the process's original
stdout; vLLM's and torch's own prints are sent to stderr so they never mix with them.
"""

from __future__ import annotations

import json
import os
import queue
import sys
import threading
import time
import traceback


class Replies:
    """The reply channel: the original stdout, one JSON line per reply, thread-safe."""

    def __init__(self) -> None:
        self._out = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
        os.dup2(2, 1)  # whatever vLLM prints goes to stderr from here on
        self._lock = threading.Lock()

    def send(self, **msg) -> None:
        line = json.dumps(msg)
        with self._lock:
            self._out.write(line + "\n")
            self._out.flush()


def read_requests(inbox: queue.Queue) -> None:
    """Parse stdin lines into the inbox; None marks its end."""
    for line in sys.stdin:
        if line.strip():
            inbox.put(json.loads(line))
    inbox.put(None)


def refresh_tied_heads(model) -> int:
    """Re-pack an output head tied to the input embeddings after an in-place reload.

    On a CPU vLLM multiplies by a packed copy of each linear weight made when the model
    was loaded. ``reload_weights`` writes new values into the tied embedding's storage,
    which the head shares, but the head itself loads nothing from the checkpoint, so its
    packed copy would keep the old weights. Returns how many heads were re-packed."""
    from vllm.model_executor.layers.vocab_parallel_embedding import (
        ParallelLMHead,
        VocabParallelEmbedding,
    )

    embeddings = {id(m.weight) for m in model.modules()
                  if isinstance(m, VocabParallelEmbedding) and not isinstance(m, ParallelLMHead)}
    n = 0
    for m in model.modules():
        if isinstance(m, ParallelLMHead) and id(m.weight) in embeddings:
            m.quant_method.process_weights_after_loading(m)
            n += 1
    return n


class WeightSync:
    """Mixed into a vLLM server's workers (``--worker-extension-cls
    codeloop.policy.vllm_worker.WeightSync``, this checkout on its PYTHONPATH): one
    ``/collective_rpc`` call ``codeloop_sync`` reloads a checkpoint in place and re-packs
    a tied head, as the engine beside a stage does (``Worker.control``)."""

    def codeloop_sync(self, weights_path: str) -> int:
        from vllm.platforms import current_platform

        self.model_runner.reload_weights(weights_path=weights_path)
        if current_platform.is_cpu():
            return refresh_tied_heads(self.model_runner.get_model())
        return 0


class Worker:
    def __init__(self, replies: Replies, start: dict) -> None:
        from vllm import LLM

        self.replies = replies
        t0 = time.perf_counter()
        self.llm = LLM(**start["llm"])
        self.engine = self.llm.llm_engine
        self.start_s = time.perf_counter() - t0
        self.loras: dict[str, int] = {}
        from vllm.platforms import current_platform

        self.cpu = current_platform.is_cpu()

    def request(self, m: dict) -> None:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        params = SamplingParams(
            temperature=m["temperature"], top_p=m["top_p"],
            repetition_penalty=m["repetition_penalty"], max_tokens=m["max_tokens"],
            seed=m["seed"], logprobs=0, stop_token_ids=m["stop_ids"], stop=m["stop"] or None,
            include_stop_str_in_output=True, ignore_eos=True, skip_special_tokens=False,
            detokenize=bool(m["stop"]),  # stop strings are matched on text
        )
        prompt = TokensPrompt(prompt_token_ids=m["ids"])
        self.engine.add_request(m["id"], prompt, params, lora_request=self.lora(m.get("lora")))

    def lora(self, spec: dict | None):
        """A LoRA request per adapter version: a new version is hot-loaded under a new id."""
        if not spec:
            return None
        from vllm.lora.request import LoRARequest

        key = spec["key"]
        if key not in self.loras:
            self.loras[key] = len(self.loras) + 1
        return LoRARequest(key, self.loras[key], spec["path"])

    def step(self) -> None:
        for out in self.engine.step():
            if out.finished:
                self.reply(out)

    def reply(self, out) -> None:
        c = out.outputs[0]
        ids = list(c.token_ids)
        logps = [float(lp[t].logprob) for t, lp in zip(ids, c.logprobs or [], strict=False)]
        if len(logps) != len(ids):
            self.replies.send(op="error", id=out.request_id,
                              error=f"{len(ids)} tokens but {len(logps)} log-probs")
            return
        finish = "stop" if c.finish_reason == "stop" else "length"
        self.replies.send(op="out", id=out.request_id, ids=ids, logps=logps, finish=finish)

    def drain(self) -> None:
        while self.engine.has_unfinished_requests():
            self.step()

    def control(self, m: dict) -> None:
        self.drain()  # weights and memory change only between requests
        t0 = time.perf_counter()
        if m["op"] == "sync":
            self.llm.collective_rpc("reload_weights", kwargs={"weights_path": m["path"]})
            if self.cpu:
                self.llm.apply_model(refresh_tied_heads)
            self.llm.reset_prefix_cache()
            self.replies.send(op="synced", id=m["id"], seconds=time.perf_counter() - t0)
        elif m["op"] == "sleep":
            self.llm.sleep(level=1)
            self.replies.send(op="done", id=m["id"], seconds=time.perf_counter() - t0)
        elif m["op"] == "wake":
            self.llm.wake_up()
            self.replies.send(op="done", id=m["id"], seconds=time.perf_counter() - t0)
        else:
            self.replies.send(op="error", id=m.get("id"), error=f"unknown op {m['op']!r}")

    def serve(self, inbox: queue.Queue) -> None:
        while True:
            busy = self.engine.has_unfinished_requests()
            try:
                m = inbox.get(block=not busy)
            except queue.Empty:
                self.step()
                continue
            if m is None or m["op"] == "close":
                return
            try:
                if m["op"] == "gen":
                    self.request(m)
                else:
                    self.control(m)
            except Exception as exc:  # noqa: BLE001 - one request's failure is its answer
                self.replies.send(op="error", id=m.get("id"), error=f"{type(exc).__name__}: {exc}")


def main() -> int:
    replies = Replies()
    inbox: queue.Queue = queue.Queue()
    threading.Thread(target=read_requests, args=(inbox,), daemon=True).start()
    start = inbox.get()
    if start is None or start.get("op") != "start":
        replies.send(op="error", error="the first request must be op start")
        return 2
    try:
        worker = Worker(replies, start)
    except BaseException as exc:  # noqa: BLE001 - reported to the client, then we exit
        traceback.print_exc()
        replies.send(op="error", error=f"the engine did not start: {type(exc).__name__}: {exc}")
        return 1
    import vllm

    replies.send(op="ready", start_s=worker.start_s, vllm=vllm.__version__,
                 max_model_len=worker.llm.llm_engine.model_config.max_model_len)
    try:
        worker.serve(inbox)
    except BaseException as exc:  # noqa: BLE001 - the engine itself failed: say so, then exit
        traceback.print_exc()
        replies.send(op="error", error=f"the engine failed: {type(exc).__name__}: {exc}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
