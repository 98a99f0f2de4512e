"""Optional LLM judge (off by default): a model grades (task, code) on a 0-10 rubric.

Two backends: any OpenAI-compatible ``/chat/completions`` endpoint over plain HTTP
(urllib, no SDK: vLLM, llama.cpp server, TGI, OpenAI), or a local Hugging Face model
directory. The judge sees the task prompt, the visible tests and the code, never hidden
tests. An unreachable or nonsensical judge raises JudgeError, which score turns into
``infra_error`` (excluded from training), never into a reward of 0.
"""

from __future__ import annotations

import json
import os
import re
import urllib.error
import urllib.request
from typing import Protocol

from codeloop.schema import Task

RUBRIC = (
    "You grade Python solutions to programming tasks. Judge correctness, whether the code "
    "solves the general problem rather than special-casing examples, and clarity. Answer "
    "with one integer from 0 (useless or cheating) to 10 (correct and general), nothing else."
)
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


class JudgeError(RuntimeError):
    """The judge could not give a score (infrastructure: unreachable, malformed reply)."""


class Judge(Protocol):
    def score(self, task: Task, code: str) -> float:
        """Score in [0, 1]."""
        ...


def judge_prompt(task: Task, code: str) -> str:
    tests = "\n".join(task.visible_tests[:5])
    return f"Task:\n{task.prompt}\n\nExample tests:\n{tests}\n\nSolution:\n```python\n{code}\n```"


def parse_score(text: str) -> float:
    """First number in the reply, 0-10, scaled to [0, 1]; JudgeError when absent or out of range."""
    m = _NUMBER.search(text or "")
    if not m:
        raise JudgeError(f"judge reply has no score: {text[:200]!r}")
    value = float(m.group())
    if not 0 <= value <= 10:
        raise JudgeError(f"judge score {value} outside 0-10 in reply {text[:200]!r}")
    return value / 10.0


class HttpJudge:
    """OpenAI-compatible chat endpoint; ``url`` is the base (``http://host:8000/v1``)."""

    def __init__(self, url: str, model: str, *, api_key_env: str = "", timeout_s: float = 30.0):
        base = url.rstrip("/")
        self.url = base if base.endswith("/chat/completions") else base + "/chat/completions"
        self.model = model
        self.api_key = os.environ.get(api_key_env, "") if api_key_env else ""
        self.timeout_s = timeout_s

    def _post(self, body: dict) -> dict:
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        req = urllib.request.Request(
            self.url, data=json.dumps(body).encode(), headers=headers, method="POST"
        )
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                return json.loads(resp.read().decode("utf-8"))
        except (urllib.error.URLError, TimeoutError, OSError, ValueError) as exc:
            raise JudgeError(f"judge at {self.url} failed: {exc}") from exc

    def score(self, task: Task, code: str) -> float:
        body = {
            "model": self.model,
            "temperature": 0,
            "max_tokens": 8,
            "messages": [
                {"role": "system", "content": RUBRIC},
                {"role": "user", "content": judge_prompt(task, code)},
            ],
        }
        reply = self._post(body)
        try:
            text = reply["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError) as exc:
            raise JudgeError(f"judge at {self.url}: unexpected reply {str(reply)[:200]}") from exc
        return parse_score(text)


class LocalHFJudge:
    """A local transformers causal LM (directory or cached id), greedy decoding."""

    def __init__(self, path: str, *, max_new_tokens: int = 8):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        try:
            self.tok = AutoTokenizer.from_pretrained(path)
            self.model = AutoModelForCausalLM.from_pretrained(path)
        except OSError as exc:
            raise JudgeError(f"local judge model {path!r} could not be loaded: {exc}") from exc
        self.model.eval()
        self.max_new_tokens = max_new_tokens

    def score(self, task: Task, code: str) -> float:
        import torch

        text = f"{RUBRIC}\n\n{judge_prompt(task, code)}\n\nScore:"
        if getattr(self.tok, "chat_template", None):
            msgs = [
                {"role": "system", "content": RUBRIC},
                {"role": "user", "content": judge_prompt(task, code)},
            ]
            text = self.tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
        enc = self.tok(text, return_tensors="pt")
        with torch.no_grad():
            out = self.model.generate(
                **enc,
                max_new_tokens=self.max_new_tokens,
                do_sample=False,
                pad_token_id=self.tok.pad_token_id or self.tok.eos_token_id,
            )
        reply = self.tok.decode(out[0, enc["input_ids"].shape[1] :], skip_special_tokens=True)
        return parse_score(reply)


def make_judge(kind: str, target: str, *, model: str = "", api_key_env: str = "", timeout_s=30.0):
    """Build a judge: kind "http" (target = base URL) or "hf" (target = model path)."""
    if kind == "http":
        if not target:
            raise JudgeError("reward.judge_url is empty but the reward version needs a judge")
        return HttpJudge(target, model, api_key_env=api_key_env, timeout_s=timeout_s)
    if kind == "hf":
        return LocalHFJudge(target)
    raise JudgeError(f"unknown judge kind {kind!r}; allowed: http, hf")
