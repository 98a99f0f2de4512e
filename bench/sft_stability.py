"""How much does the nightly's SFT policy move under small changes? Held-out pass@1, mean +- SD.

Run: ``nice -n 19 .venv/bin/python bench/sft_stability.py [--jobs 2] [--samples 4]``
(``--table`` reprints the table of ``--out``; finished jobs there are not rerun).

The nightly's own inputs, built in process by the stages' library code: per perturbation a
workspace gets ``codeloop.stages.clean.run`` (params.yaml's clean section: synthetic function
tasks, repository tasks, the held-out split and frozen sets) and ``policy_init.run`` (the
tokenizer trained on that corpus, repository files included); the expert demos are collected
once per workspace with ``codeloop.stages.sft.collect_demos``, exactly as the sft stage does.
Each job is then the sft stage's ``run_sft(base policy, function tasks, params.sft, demos)``
under one training configuration, and the SFT policy is evaluated on the held-out function
set (data/clean/frozen/heldout.parquet) with ``evaluate_sets`` and params.evaluate, as the
evaluate stage does, except that it draws ``--samples`` samples per task: pass@1 is then the
expected figure of the stage's one-sample evaluation, and ``eval SD`` is the spread one
one-sample evaluation of that very policy would have around it (sqrt(sum p(1-p)) / n over the
per-task pass rates p): the metric's own noise, apart from the policy's.

Perturbations (the nightly's swings came from data changes as small as two repository
package names): ``default`` (params.yaml), ``seed1`` (policy_init.seed and sft.seed 1: other
initial weights, batch order and revise draws), ``repos1`` (clean.repo_tasks.seed 1: other
training repositories, so another tokenizer corpus, other demos and other batches; the
function tasks and the held-out set stay the same). A configuration is a set of params
overrides on top; ``+ema<d>`` rows are the same training run read through an exponential
moving average of its weights (`codeloop.policy.sft.WeightEMA`, fed by run_sft's on_step
at the point where ``sft.ema`` updates its own, so the row is what ``sft.ema: d`` gives).
The baseline is ``old-default``, the sft section before this bench (lr 3e-3, warmup 20,
cosine to 0.1x, no average), trained in the same run. ``SFT s`` is run_sft's own wall
seconds (under whatever else the machine runs: compare steps, not these, for cost).

Result: metrics/sft_stability.jsonl (``--table`` prints it as a table: per configuration the mean +- SD over perturbations, min..max, the eval SD and
each perturbation's pass@1).

Mechanism: the training loss is still falling steeply at step 800 when the cosine's tail
stops it, and held-out pass@1 follows how far down a run got (the lower a run's final
training loss, the higher its pass@1). At 1200 steps every run reaches the flat part and the
perturbations land close together; a lower lr (``lr1e-3``) gets less far. Not the metric: one evaluation's own SD (``eval SD``) is
far below the spread between perturbations.
Not the tokenizer alone: the seed perturbation keeps the tokenizer and moves as much.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import pickle
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from codeloop.config import Params, load_params  # noqa: E402

PERTURBATIONS: dict[str, dict] = {
    "default": {},
    "seed1": {"policy_init.seed": 1, "sft.seed": 1},
    "repos1": {"clean.repo_tasks.seed": 1},
    # Data versions: the synthetic generator's seed (training tasks and the held-out split).
    **{f"gen{k}": {"clean.sources.0.seed": k} for k in range(1, 6)},
}
OLD_DEFAULT = {"sft.lr": 3e-3, "sft.warmup_steps": 20, "sft.lr_floor": 0.1, "sft.ema": 0.0}
CONFIGS: dict[str, dict] = {
    "old-default": OLD_DEFAULT,
    "steps1200": {**OLD_DEFAULT, "sft.steps": 1200},
    "lr1e-3": {**OLD_DEFAULT, "sft.lr": 1e-3, "sft.warmup_steps": 50, "sft.lr_floor": 0.0},
    "floor0": {**OLD_DEFAULT, "sft.lr_floor": 0.0},
}
# --configs params.yaml: the params file as it is (what the sft stage trains), not run by default.
ALL_CONFIGS = {**CONFIGS, "params.yaml": {}}
EMA_DECAYS = (0.99,)


def with_overrides(params: Params, overrides: dict) -> Params:
    """params with dotted keys set (``clean.repo_tasks.seed``), validated again."""
    d = params.model_dump()
    for key, value in overrides.items():
        *head, last = key.split(".")
        node = d
        for k in head:
            node = node[int(k)] if isinstance(node, list) else node[k]
        if isinstance(node, list):
            node[int(last)] = value
            continue
        if last not in node:
            raise KeyError(f"unknown params key {key!r}")
        node[last] = value
    return Params.model_validate(d)


def prepare(params: Params, root: Path) -> dict:
    """clean + policy_init into workspace ``root`` and the expert demos (pickled once)."""
    from codeloop.io import read_tasks
    from codeloop.paths import Paths
    from codeloop.stages import clean, policy_init
    from codeloop.stages.sft import collect_demos

    paths = Paths(root)
    t0 = time.perf_counter()
    if not paths.clean_tasks.exists():
        clean.run(params, paths)
    if not (paths.base_model / "model_version.txt").exists():
        policy_init.run(params, paths)
    demos_file = root / "demos.pkl"
    if not demos_file.exists():
        repo = [t for t in read_tasks(paths.clean_tasks) if t.kind == "repo"]
        demos = collect_demos(params, paths, repo)[0] if repo else []
        demos_file.write_bytes(pickle.dumps(demos))
    return {"root": str(root), "prepare_s": round(time.perf_counter() - t0, 1)}


def train_and_eval(job: dict) -> list[dict]:
    """One run_sft as the sft stage runs it; one row per weights read (last, each EMA)."""
    from codeloop.io import read_tasks
    from codeloop.paths import Paths
    from codeloop.policy.model import Policy
    from codeloop.policy.sft import WeightEMA, run_sft

    params = with_overrides(load_params(job["params_file"]), job["overrides"])
    paths = Paths(job["root"])
    tasks = read_tasks(paths.clean_tasks)
    demos = pickle.loads((paths.root / "demos.pkl").read_bytes())
    policy = Policy.load(paths.base_model, device="cpu")
    # From the initial weights, as sft.ema's own average starts.
    emas = {d: WeightEMA(policy.model, d) for d in job["ema"]}

    losses: list[float] = []

    def on_step(step: int, model, loss: float) -> None:
        losses.append(loss)
        for e in emas.values():
            e.update(model)

    func = [t for t in tasks if t.kind != "repo"]
    stats = run_sft(policy, func, params.sft, demos if params.sft.agent_fraction > 0 else [],
                    on_step=on_step)
    base = {k: job[k] for k in ("perturbation", "config")}
    base.update(sft_s=round(stats["seconds"], 1), loss_last=stats["loss_last"])
    # Training loss per 100-step window: where a run that ends badly parts from a good one.
    base["loss_curve"] = [round(sum(w) / len(w), 4) for w in _windows(losses, 100)]
    # The checkpoint's hash: with no overrides it equals the nightly's models/init version.
    base["model_version"] = policy.save(paths.root / f"sft-{job['config']}")
    common = Paths(job["common_root"]) if job.get("common_root") else None
    rows = [{**base, **evaluate(policy, params, paths, tasks, job["samples"], common)}]
    for d, e in emas.items():
        e.copy_to(policy.model)
        rows.append({**base, "config": f"{job['config']}+ema{d:g}",
                     **evaluate(policy, params, paths, tasks, job["samples"], common)})
    return rows


def evaluate(policy, params: Params, paths, training: list, samples: int, common=None) -> dict:
    """Held-out function pass@1 as the evaluate stage computes it, over ``samples`` draws.

    With ``common`` (another workspace's Paths), also pass@1 on that workspace's held-out
    set less any task this run trained on (``common@1``): one set for every data version,
    so its spread is the policies' alone, without the spread of drawing a held-out set.
    """
    from codeloop.evaluate.metrics import evaluate_sets
    from codeloop.io import read_tasks
    from codeloop.sandbox import make_executor

    heldout = read_tasks(paths.frozen_dir / "heldout.parquet")
    cfg = params.evaluate.model_copy(update={"samples_per_task": samples})
    executor = make_executor(params.sandbox)
    try:
        m = evaluate_sets(policy, {"heldout": heldout}, executor, cfg, training_tasks=training,
                          timeout_s=params.sandbox.timeout_s)
    finally:
        executor.close()
    rates = m["pass_rates"]["heldout"]
    n = len(rates)
    extra = {}
    if common is not None:
        seen = {t.task_id for t in training}
        shared = [t for t in read_tasks(common.frozen_dir / "heldout.parquet")
                  if t.task_id not in seen]
        executor = make_executor(params.sandbox)
        try:
            c = evaluate_sets(policy, {"common": shared}, executor, cfg,
                              training_tasks=training, timeout_s=params.sandbox.timeout_s)
        finally:
            executor.close()
        extra = {"common@1": c["sets"]["common"]["pass@1"], "common_n": len(shared)}
    return {
        **extra,
        "pass@1": m["sets"]["heldout"]["pass@1"],
        "eval_sd": math.sqrt(sum(p * (1 - p) for p in rates.values())) / n,
        "n_tasks": n,
        "heldout_ids": sorted(rates)[:3],
        "rates": rates,
    }


def _windows(xs: list, size: int) -> list[list]:
    return [xs[i : i + size] for i in range(0, len(xs), size)]


def _sd(xs: list[float]) -> float:
    m = sum(xs) / len(xs)
    return math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1)) if len(xs) > 1 else 0.0


def table(rows: list[dict], baseline: str = "old-default") -> str:
    """mean +- SD over perturbations per configuration, the baseline first."""
    perts = sorted({r["perturbation"] for r in rows}, key=list(PERTURBATIONS).index)
    configs = sorted({r["config"] for r in rows}, key=lambda c: (c != baseline, c))
    head = f"{'config':<22}{'pass@1 mean +- SD':>20}{'min..max':>14}{'eval SD':>9}{'SFT s':>8}"
    lines = [head + "".join(f"{p:>9}" for p in perts)]
    for c in configs:
        by = {r["perturbation"]: r for r in rows if r["config"] == c}
        xs = [by[p]["pass@1"] for p in perts if p in by]
        if not xs:
            continue
        mean = sum(xs) / len(xs)
        evsd = sum(by[p]["eval_sd"] for p in by) / len(by)
        secs = sum(by[p]["sft_s"] for p in by) / len(by)
        cells = "".join(f"{by[p]['pass@1']:>9.3f}" if p in by else f"{'-':>9}" for p in perts)
        lines.append(
            f"{c:<22}{f'{mean:.3f} +- {_sd(xs):.3f}':>20}{f'{min(xs):.2f}..{max(xs):.2f}':>14}"
            f"{evsd:>9.3f}{secs:>8.0f}{cells}"
        )
        cs = [by[p]["common@1"] for p in perts if p in by and "common@1" in by[p]]
        if cs:
            cm = sum(cs) / len(cs)
            ccells = "".join(f"{by[p]['common@1']:>9.3f}" if "common@1" in by.get(p, {})
                             else f"{'-':>9}" for p in perts)
            lines.append(f"{'  on one common set':<22}{f'{cm:.3f} +- {_sd(cs):.3f}':>20}"
                         f"{f'{min(cs):.2f}..{max(cs):.2f}':>14}{'':>17}{ccells}")
    return "\n".join(lines)


def spread_rows(rows: list[dict]) -> list[dict]:
    """Per configuration and held-out set (each version's own, the common one): the
    number of versions, mean, SD, min and max of pass@1 over them."""
    out = []
    for c in sorted({r["config"] for r in rows}):
        mine = [r for r in rows if r["config"] == c]
        for name, key in (("own", "pass@1"), ("common", "common@1")):
            xs = [r[key] for r in mine if key in r]
            if len(xs) < 2:
                continue
            out.append({"config": c, "set": name, "versions": len(xs),
                        "mean": round(sum(xs) / len(xs), 4), "sd": round(_sd(xs), 4),
                        "min": round(min(xs), 4), "max": round(max(xs), 4)})
    return out


def write_summary(rows: list[dict], path: Path) -> None:
    import csv

    spread = spread_rows(rows)
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, ["config", "set", "versions", "mean", "sd", "min", "max"])
        w.writeheader()
        w.writerows(spread)


def _args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--work", default="/tmp/codeloop-sft-stability", help="workspaces (kept)")
    ap.add_argument("--out", default="metrics/sft_stability.jsonl")
    ap.add_argument("--jobs", type=int, default=2, help="training jobs at once (1 thread each)")
    ap.add_argument("--samples", type=int, default=4, help="evaluation samples per task")
    ap.add_argument("--configs", default=",".join(CONFIGS), help="comma-separated names")
    ap.add_argument("--perturbations", default=",".join(PERTURBATIONS))
    ap.add_argument(
        "--config", action="append", default=[], metavar="NAME:KEY=VALUE,...",
        help="an extra configuration on top of old-default (values parsed as JSON)",
    )
    ap.add_argument(
        "--ema", default=",".join(map(str, EMA_DECAYS)),
        help="comma-separated EMA decays read from each run ('' = none)",
    )
    ap.add_argument("--steps", type=int, default=None, help="override sft.steps (smoke runs)")
    ap.add_argument("--common", default="",
                    help="perturbation whose held-out set every run is also scored on")
    ap.add_argument("--table", action="store_true", help="print the table of --out; exit")
    ap.add_argument("--summary", default="",
                    help="with --table: write per configuration and set the spread as this CSV")
    return ap.parse_args()


def _extra_configs(specs: list[str]) -> dict[str, dict]:
    out = {}
    for spec in specs:
        name, _, body = spec.partition(":")
        kv = dict(item.split("=", 1) for item in body.split(",") if item)
        out[name] = {**OLD_DEFAULT, **{k: json.loads(v) for k, v in kv.items()}}
    return out


def _read(out: Path) -> list[dict]:
    return [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []


def main() -> int:
    a = _args()
    out = Path(a.out)
    if a.table:
        print(table(_read(out)))
        if a.summary:
            write_summary(_read(out), Path(a.summary))
        return 0
    configs = {**{c: ALL_CONFIGS[c] for c in a.configs.split(",") if c}, **_extra_configs(a.config)}
    params = load_params(a.params)
    done = {(r["perturbation"], r["config"]) for r in _read(out)}
    roots = {}
    perts = a.perturbations.split(",")
    with ProcessPoolExecutor(a.jobs, mp_context=get_context("spawn")) as pool:
        preps = pool.map(prepare, [with_overrides(params, PERTURBATIONS[p]) for p in perts],
                         [Path(a.work) / p for p in perts])
        for pert, prep in zip(perts, preps, strict=True):
            roots[pert] = prep["root"]
            print(f"{pert}: workspace ready ({prep['prepare_s']} s)", flush=True)
    jobs = []  # configuration-major: the baseline's spread is known first
    for name, over in configs.items():
        for pert, root in roots.items():
            if (pert, name) in done:
                continue
            over_p = {**PERTURBATIONS[pert], **over}
            if a.steps is not None:
                over_p["sft.steps"] = a.steps
            jobs.append({"perturbation": pert, "config": name, "overrides": over_p,
                         "params_file": a.params, "root": root, "samples": a.samples,
                         "common_root": roots.get(a.common, ""),
                         "ema": [float(x) for x in a.ema.split(",") if x]})
    print(f"{len(jobs)} training jobs, {a.jobs} at once", flush=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    with ProcessPoolExecutor(a.jobs, mp_context=get_context("spawn")) as pool:
        for rows in pool.map(train_and_eval, jobs):
            with out.open("a") as f:
                for r in rows:
                    f.write(json.dumps(r) + "\n")
                    print(f"{r['perturbation']:>8} {r['config']:<22} pass@1 {r['pass@1']:.3f} "
                          f"(eval SD {r['eval_sd']:.3f}) SFT {r['sft_s']} s", flush=True)
    print(table(_read(out)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
