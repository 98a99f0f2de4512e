"""Sharded training (``train.strategy: fsdp``): torch FSDP2 over the ranks of a launch.

With ``fsdp`` each rank holds 1/N of every weight, of its gradient and of AdamW's
moments instead of DDP's full replica: ``wrap`` applies ``fully_shard`` to every
transformer block (the model's ``_no_split_modules`` classes) and then to the root,
whose group keeps the embeddings, the final norm and the LM head. A tied LM head is the
embedding's Parameter, so it lands once, in the root's group, and stays tied.

Launch it as DDP, with ``train.strategy: fsdp`` in params.yaml (from the workspace root):

    torchrun --nproc_per_node N -m codeloop.stages.train --root .
    accelerate launch --config_file configs/accelerate_fsdp.yaml -m codeloop.stages.train --root .

The accelerate file only launches N processes (``distributed_type: FSDP`` also asks
this stage for ``strategy: fsdp``, and a ``ddp`` params.yaml is refused); the sharding
itself is this module's, whatever the file's other ``fsdp_*`` keys say.

The update is the same as DDP's: every rank runs the same micro-batches and takes its
reweighted shard of each (codeloop.train.distributed.shard); FSDP's reduce-scatter
averages the gradients over the ranks (divide factor: the world size) just as DDP's
all-reduce does, so the step equals a single process's on the full batch. Precision: on
CUDA the gathered weights compute in bf16 and gradients are reduced in fp32 (the
sharded master weights and AdamW stay fp32); on CPU (gloo) everything stays fp32, since
CPU bf16 matmuls are slow and would make the ranks differ from a single process.

Saving (codeloop.train.distributed.save_on_main, ``gather_checked`` here): every rank
takes part in gathering the full state dict to rank 0 (CPU), which saves it as the ordinary Hugging Face directory (an adapter for
LoRA) that Policy.load and the vLLM engine read. Ranks hold different shards, so the
digest check is: every rank reports the sha256 of its own shards, rank 0 cuts the
gathered weights into the same shards and must get the same digests (the saved weights
are exactly what the ranks trained); ``ranks.jsonl`` records each rank's shard digest
and the digest of the full weights. RFT (``train.rft``) runs before the wrap, unsharded.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist

from codeloop.paths import Paths

if TYPE_CHECKING:
    from codeloop.config import Params

STRATEGIES = ("ddp", "fsdp")


class ShardingError(RuntimeError):
    """The model or the launch cannot be sharded as configured (names train.strategy)."""


def _hf_model(model: torch.nn.Module) -> torch.nn.Module:
    """The Hugging Face model under a peft wrapper (or the model itself)."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def blocks(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The transformer blocks FSDP shards one by one (HF's ``_no_split_modules`` classes)."""
    names = set(getattr(_hf_model(model), "_no_split_modules", None) or ())
    found = [m for m in model.modules() if type(m).__name__ in names]
    if not found:
        raise ShardingError(
            f"train.strategy fsdp: found no transformer blocks in {type(model).__name__} "
            f"(its _no_split_modules: {sorted(names) or 'none'}); use train.strategy: ddp"
        )
    return found


def layer_count(config: dict) -> int:
    """Transformer layers a config.json declares (GPT-2's n_layer, Llama/Qwen's num_hidden_layers)."""
    for key in ("num_hidden_layers", "n_layer", "num_layers"):
        if isinstance(config.get(key), int):
            return int(config[key])
    text = config.get("text_config")  # multimodal configs nest the language model's
    return layer_count(text) if isinstance(text, dict) else 0


def mixed_precision(device: torch.device):
    """bf16 compute with fp32 reduction on CUDA; None (all fp32) on CPU, see the module doc."""
    from torch.distributed.fsdp import MixedPrecisionPolicy

    if device.type != "cuda":
        return MixedPrecisionPolicy()  # fp32 params and reduction: gloo ranks match one process
    return MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)


def wrap(model: torch.nn.Module, device: torch.device) -> torch.nn.Module:
    """fully_shard each block, then the root, over all ranks; the same module, now sharded."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    policy = mixed_precision(device)
    for block in blocks(model):
        fully_shard(block, mesh=mesh, mp_policy=policy)
    fully_shard(model, mesh=mesh, mp_policy=policy)
    return model


def is_sharded(model: torch.nn.Module) -> bool:
    """True once ``wrap`` has run: the parameters are DTensors."""
    from torch.distributed.tensor import DTensor

    return any(isinstance(p, DTensor) for p in model.parameters())


def reshard(model: torch.nn.Module) -> None:
    """Free a sharded model's gathered weights after a forward with no backward (the frozen
    reference): FSDP leaves the root's unsharded, waiting for a backward that never comes."""
    from torch.distributed.fsdp import FSDPModule

    if isinstance(model, FSDPModule):
        model.reshard()


def plain(t: torch.Tensor) -> torch.Tensor:
    """A replicated DTensor (clip_grad_norm_'s total norm) as an ordinary tensor."""
    from torch.distributed.tensor import DTensor

    return t.full_tensor() if isinstance(t, DTensor) else t


def _aliases(model: torch.nn.Module) -> dict[str, str]:
    """Each extra name of a shared Parameter (a tied LM head) -> its first name."""
    first: dict[int, str] = {}
    out = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        out.update({name: first[id(p)]} if id(p) in first else {})
        first.setdefault(id(p), name)
    return out


def full_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The whole model's state dict on rank 0's CPU ({} elsewhere); collective.

    The gather returns separate copies for the names of one tied Parameter; they are made
    one tensor again, so save_pretrained drops the tied LM head as it does unsharded.
    """
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    opts = StateDictOptions(full_state_dict=True, cpu_offload=True)
    sd = get_model_state_dict(model, options=opts)
    for name, src in _aliases(model).items():
        if name in sd and src in sd:
            sd[name] = sd[src]
    return sd


def digest(state: dict[str, torch.Tensor]) -> str:
    """sha256 over every entry's name and bytes (CPU copy), in name order."""
    h = hashlib.sha256()
    for name, t in sorted(state.items()):
        h.update(name.encode() + b"\0")
        h.update(t.detach().to("cpu").contiguous().numpy().tobytes())
    return h.hexdigest()


def local_shards(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """This rank's piece of every parameter (DTensor.to_local), by name."""
    from torch.distributed.tensor import DTensor

    return {n: p.to_local() if isinstance(p, DTensor) else p for n, p in model.named_parameters()}


def shards_of(model: torch.nn.Module, full: dict[str, torch.Tensor], world: int) -> list[str]:
    """The shard digests each rank should report, cut from the gathered weights.

    FSDP2 shards dim 0 as torch.chunk does (ranks past the last chunk hold empty rows).
    """
    per_rank: list[dict[str, torch.Tensor]] = [{} for _ in range(world)]
    for name, _ in model.named_parameters():
        chunks = torch.chunk(full[name], world, dim=0)
        for r in range(world):
            per_rank[r][name] = chunks[r] if r < len(chunks) else full[name][:0]
    return [digest(s) for s in per_rank]


def gather_checked(model: torch.nn.Module) -> tuple[dict, list[dict], str]:
    """The full state dict and ranks.jsonl's rows on rank 0 ({} and [] elsewhere), and
    what is wrong ('' when nothing; the same on every rank); collective.

    Every rank reports the digest of its own shards; rank 0 cuts the gathered weights
    into the same shards and must find the same digests.
    """
    full = full_state_dict(model)
    world = dist.get_world_size()
    mine: list[str | None] = [None] * world
    dist.all_gather_object(mine, digest(local_shards(model)))
    verdict: list[Any] = [""]
    rows: list[dict] = []
    if dist.get_rank() == 0:
        if shards_of(model, full, world) != mine:
            verdict[0] = f"the gathered weights do not cut into the shards the ranks hold {mine}"
        full_sha = digest(full)
        rows = [
            {"rank": r, "strategy": "fsdp", "shard_sha256": d, "param_sha256": full_sha}
            for r, d in enumerate(mine)
        ]
    dist.broadcast_object_list(verdict, src=0)
    return full, rows, str(verdict[0])


def _trainable_names(model: torch.nn.Module) -> list[str]:
    return [n for n, p in model.named_parameters() if p.requires_grad]


def full_optimizer_state(model: torch.nn.Module, opt: torch.optim.Optimizer) -> dict:
    """AdamW's state gathered to rank 0, keyed by parameter index as ``opt.state_dict()``
    is unsharded (so optimizer.pt resumes under either strategy); collective."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

    opts = StateDictOptions(full_state_dict=True, cpu_offload=True)
    sd = get_optimizer_state_dict(model, opt, options=opts)
    if not sd:
        return {}
    index = {n: i for i, n in enumerate(_trainable_names(model))}
    unknown = [k for k in sd["state"] if k not in index]
    if unknown:
        raise ShardingError(f"optimizer state names no trainable parameter: {unknown[:3]}")
    groups = [{**g, "params": [index[n] for n in g["params"]]} for g in sd["param_groups"]]
    return {"state": {index[k]: v for k, v in sd["state"].items()}, "param_groups": groups}


def load_optimizer_state(model: torch.nn.Module, opt: torch.optim.Optimizer, state: dict) -> None:
    """Shard an index-keyed AdamW state (optimizer.pt) into opt; every rank passes the same."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

    names = _trainable_names(model)
    by_name = {
        "state": {names[i]: v for i, v in state["state"].items()},
        "param_groups": [
            {**g, "params": [names[i] for i in g["params"]]} for g in state["param_groups"]
        ],
    }
    opts = StateDictOptions(full_state_dict=True)
    set_optimizer_state_dict(model, opt, optim_state_dict=by_name, options=opts)


def layers_of(policy_dir: str | os.PathLike) -> int | None:
    """Layer count in a checkpoint's config.json (an adapter's base's); None if unreadable."""
    import json
    from pathlib import Path

    path = Path(policy_dir)
    if (path / "adapter_config.json").exists():
        from codeloop.policy.lora import base_dir_of

        try:
            path = base_dir_of(path)
        except Exception:  # a broken pointer is the loader's error to report, not this one's
            return None
    try:
        config = json.loads((path / "config.json").read_text())
    except (OSError, ValueError):
        return None
    return layer_count(config)


def check_launch(strategy: str, world: int, layers: int | None, quantize: str = "none") -> str:
    """Why ``train.strategy`` cannot run on this launch, or '' when it can.

    ``layers``: the model's transformer layers (None: unknown here). fsdp with one process
    is allowed and trains unsharded, the same update (``codeloop preflight`` itself runs
    outside any launcher); a launcher that asks for FSDP under ``ddp`` is refused.
    """
    launcher_fsdp = os.environ.get("ACCELERATE_USE_FSDP", "").lower() == "true"
    if launcher_fsdp and strategy != "fsdp":
        return (
            "train.strategy is ddp but the launcher asks for FSDP (accelerate config "
            "distributed_type: FSDP); set train.strategy: fsdp in params.yaml"
        )
    if strategy not in STRATEGIES:
        return f"train.strategy {strategy!r} is not one of {', '.join(STRATEGIES)}"
    if strategy != "fsdp" or world == 1:
        return ""
    if quantize != "none":
        return (
            f"train.strategy fsdp cannot shard a bitsandbytes-quantized base (train.lora.quantize "
            f"{quantize}); use train.strategy: ddp for QLoRA"
        )
    if layers is not None and layers < 1:
        return (
            "train.strategy fsdp shards one transformer layer at a time, but the policy's "
            "config.json declares no layers (num_hidden_layers / n_layer); use train.strategy: ddp"
        )
    return ""


def strategy_problem(params: Params, root: str | os.PathLike, world: int) -> str:
    """Why ``train.strategy`` cannot run on a launch of ``world`` ranks, or ''."""
    cfg = params.train
    layers = layers_of(Paths(Path(root)).checkpoint(params.policy.checkpoint))
    return check_launch(cfg.strategy, world, layers, cfg.lora.quantize)


def describe(strategy: str, world: int, layers: int | None) -> str:
    """One line for the preflight report when the launch is fine."""
    if strategy == "ddp":
        return f"train.strategy ddp over {world} process(es)"
    if world == 1:
        return "train.strategy fsdp with one process: trains unsharded (launch N ranks to shard)"
    return f"train.strategy fsdp over {world} ranks, {layers or '?'} layers sharded one by one"
