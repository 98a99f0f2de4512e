"""Where the policy runs: ``policy.device`` (auto | cpu | cuda | cuda:N) resolved to a torch device.

Every stage that loads the policy (sft, rollout and its scale-out workers, train,
evaluate; policy_init builds it there) passes the resolved device to
``codeloop.policy.model.Policy.load``, so generation, the sampler's log-probs and
training run on it; inputs are moved there and outputs come back to the CPU before they
are stored. ``auto`` is CUDA when ``torch.cuda.is_available()``, else the CPU. A CUDA
device on a machine without one is a clear error naming the field, raised before any
model is loaded (and by ``codeloop preflight``), never a silent fall-back to the CPU.
"""

from __future__ import annotations

import os
import re

import torch

FIELD = "policy.device"
PATTERN = re.compile(r"^(auto|cpu|cuda(:\d+)?)$")


class DeviceError(ValueError):
    """policy.device names a device this machine does not have (a configuration error)."""


def resolve_device(spec: str = "auto") -> torch.device:
    """The torch device ``policy.device`` means on this machine (raises DeviceError)."""
    if not PATTERN.match(spec):
        raise DeviceError(f"{FIELD}: {spec!r} is not one of auto, cpu, cuda, cuda:N")
    if spec == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dev = torch.device(spec)
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise DeviceError(
                f"{FIELD}: {spec!r} but CUDA is not available on this machine "
                "(set policy.device: auto or cpu)"
            )
        count = torch.cuda.device_count()
        if dev.index is not None and dev.index >= count:
            raise DeviceError(f"{FIELD}: {spec!r} but this machine has {count} CUDA device(s)")
    return dev


def model_device(model) -> torch.device:
    """The device of a model's first parameter (where its forward passes run)."""
    return next(model.parameters()).device


def cuda_generate_kwargs(model) -> dict:
    """On CUDA, a static KV cache (transformers then compiles the decode step) where the
    class can compile; CODELOOP_STATIC_CACHE=0 turns it off. Not exercised on CPU."""
    on = model.device.type == "cuda" and os.environ.get("CODELOOP_STATIC_CACHE", "1") != "0"
    return {"cache_implementation": "static"} if on and model._can_compile_fullgraph else {}
