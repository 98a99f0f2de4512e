"""Mint a list of real repositories (repos.yaml: pinned sdists, each a training or a held-out
repository) into one task directory.

Every sdist is fetched and checked against its sha256 pin first (codeloop.data.repos.sdists:
a mismatch stops the run before anything is minted). Each repository is then minted on its
own (codeloop.data.repos.mint.mint_repo) into a work dir and merged, tasks, snapshot, env
dir and pinned wheels, into its split's directory:

    OUT/                 training repositories: tasks.parquet, instances.jsonl, repos/,
                         envs/, wheels/, manifest.json (what ``repo:OUT`` loads)
    OUT/heldout/         held-out repositories, the same files (the frozen set heldout_mint;
                         absent when no held-out repository minted a task)
    OUT/report.json      the yield table (a row per repository: tried, kept, rejected by
                         reason, seconds, or why it failed) and each repository's report

A repository that cannot be minted (its suite does not collect, no test passes, it needs
another interpreter, its environment cannot be built) is a row with its reason and the
others still mint; the sandbox itself failing stops the run. Held-out repositories'
tasks never enter OUT's own tasks.parquet, and the clean stage's ``mint`` source holds
them out once more (its leak check drops any training task of a frozen repository).
"""

from __future__ import annotations

import dataclasses
import shutil
import time
from pathlib import Path

from codeloop.data.repos.sdists import fetch_sdist

GENERATOR = "mint-list-v1"
HELDOUT_DIR = "heldout"
_MANAGED = ("tasks.parquet", "instances.jsonl", "report.json", "manifest.json", "repos", "envs",
            "wheels", HELDOUT_DIR, ".work")


@dataclasses.dataclass
class ListConfig:
    """What every repository of the list is minted with (params.yaml's ``mint`` section)."""

    max_tasks: int = 20
    seed: int = 0
    workers: int = 2
    hidden_fraction: float = 0.0
    wheel_cache: str = ".cache/mint/wheels"
    sdist_cache: str = ".cache/mint/sdists"


def fetch_all(entries, cache: str | Path) -> dict[str, Path]:
    """Each entry's sdist in ``cache`` by name, all pins checked (PinMismatch, FetchError)."""
    return {e.name: fetch_sdist(e, cache) for e in entries}


def _prepare_out(out: Path) -> None:
    """An empty or earlier mint-list output dir, cleared of what a run writes."""
    from codeloop import io

    if out.is_dir() and any(out.iterdir()):
        manifest = out / "manifest.json"
        gen = io.read_json(manifest).get("generator") if manifest.is_file() else None
        if gen != GENERATOR:
            raise ValueError(f"mint: {out} is not empty and not an earlier `mint --repos-list` "
                             f"output; refusing to write into it")
        for name in _MANAGED:
            p = out / name
            if p.is_dir():
                shutil.rmtree(p)
            elif p.exists():
                p.unlink()
    out.mkdir(parents=True, exist_ok=True)


def _move_into(src: Path, dest: Path) -> None:
    """Move each entry of dir ``src`` into ``dest`` unless one of that name is there (the
    snapshots, env dirs and wheels are named by their content)."""
    if not src.is_dir():
        return
    dest.mkdir(parents=True, exist_ok=True)
    for p in sorted(src.iterdir()):
        if not (dest / p.name).exists():
            shutil.move(str(p), str(dest / p.name))


def _row(entry, status: str, seconds: float, report: dict | None = None, reason: str = "") -> dict:
    r = report or {}
    return {"repo": entry.name, "version": entry.version, "split": entry.split,
            "status": status, "tried": r.get("tried", 0), "kept": r.get("kept", 0),
            "rejected": dict(r.get("rejected", {})),
            "stable_tests": r.get("tests", {}).get("stable", 0),
            "seconds": round(seconds, 2), "reason": reason}


def _mint_one(entry, sdist: Path, work: Path, cfg: ListConfig, backend: str):
    """(yield row, the repository's MintResult or None)."""
    from codeloop.data.repos.envbuild import EnvBuildError
    from codeloop.data.repos.mint import MintConfig, mint_repo
    from codeloop.data.repos.repo_deps import DepsError
    from codeloop.sandbox.base import SandboxError

    mcfg = MintConfig(max_tasks=entry.max_tasks or cfg.max_tasks, seed=cfg.seed,
                      workers=cfg.workers, hidden_fraction=cfg.hidden_fraction, name=entry.name,
                      license=entry.license, wheel_cache=cfg.wheel_cache,
                      extra_requirements=tuple(entry.extra_requirements))
    start = time.perf_counter()
    try:
        res = mint_repo(sdist, work, mcfg, backend=backend)
    except SandboxError:
        raise  # the sandbox failing is ours, never a repository's result
    except (DepsError, EnvBuildError) as exc:
        return _row(entry, "failed", time.perf_counter() - start,
                    reason=f"environment: {type(exc).__name__}: {exc}"[:2000]), None
    except (OSError, ValueError, RuntimeError) as exc:
        return _row(entry, "failed", time.perf_counter() - start,
                    reason=f"unusable: {exc}"[:2000]), None
    if not res.tasks:
        return _row(entry, "failed", res.report["seconds"], res.report,
                    reason="no candidate made a task"), res
    return _row(entry, "ok", res.report["seconds"], res.report), res


def _write_split(dest: Path, tasks: list, repos: list[dict], params: dict) -> None:
    from codeloop import io
    from codeloop.data.repos import store
    from codeloop.data.repos.swebench_rows import to_swebench

    dest.mkdir(parents=True, exist_ok=True)
    io.write_tasks(dest / "tasks.parquet", tasks)
    io.write_jsonl(dest / "instances.jsonl", [to_swebench(t) for t in tasks])
    store.prune_snapshots(dest / "repos", {t.snapshot for t in tasks})
    io.write_json(dest / "manifest.json", {
        "generator": GENERATOR, "tasks": len(tasks),
        "tasks_sha256": io.sha256_file(dest / "tasks.parquet"), "repos": repos, "params": params,
    })


def totals(rows: list[dict]) -> dict:
    """The yield table's sums over every repository."""
    rejected: dict[str, int] = {}
    for r in rows:
        for k, v in r["rejected"].items():
            rejected[k] = rejected.get(k, 0) + v
    return {"repos": len(rows), "ok": sum(r["status"] == "ok" for r in rows),
            "failed": sum(r["status"] != "ok" for r in rows),
            "tried": sum(r["tried"] for r in rows), "kept": sum(r["kept"] for r in rows),
            "rejected": dict(sorted(rejected.items())),
            "seconds": round(sum(r["seconds"] for r in rows), 2)}


def mint_list(entries, out_dir: str | Path, cfg: ListConfig, backend: str = "local",
              progress=None) -> dict:
    """Fetch (pins checked), mint and merge every listed repository into ``out_dir``; the
    combined report (also OUT/report.json). ``progress(row)`` is called after each one."""
    from codeloop import io

    out = Path(out_dir)
    sdists = fetch_all(entries, cfg.sdist_cache)  # every pin holds before anything is minted
    _prepare_out(out)
    params = dataclasses.asdict(cfg) | {"backend": backend}
    rows, reports = [], {}
    tasks: dict[str, list] = {"train": [], "heldout": []}
    for entry in entries:
        work = out / ".work" / entry.name
        row, res = _mint_one(entry, sdists[entry.name], work, cfg, backend)
        rows.append(row)
        if res is not None:
            reports[entry.name] = res.report
        if res is not None and res.tasks:
            dest = out if entry.split == "train" else out / HELDOUT_DIR
            for sub in ("repos", "envs", "wheels"):
                _move_into(work / sub, dest / sub)
            tasks[entry.split] += res.tasks
        shutil.rmtree(work, ignore_errors=True)
        if progress:
            progress(row)
    shutil.rmtree(out / ".work", ignore_errors=True)
    listed = [{"name": e.name, "version": e.version, "sha256": e.sha256, "license": e.license,
               "split": e.split} for e in entries]
    _write_split(out, tasks["train"], [r for r in listed if r["split"] == "train"], params)
    if tasks["heldout"]:  # no dir, no frozen set: an empty one would gate on nothing
        _write_split(out / HELDOUT_DIR, tasks["heldout"],
                     [r for r in listed if r["split"] == "heldout"], params)
    report = {"generator": GENERATOR, "yield": rows, "totals": totals(rows),
              "by_split": {s: totals([r for r in rows if r["split"] == s])
                           for s in ("train", "heldout")},
              "repos": reports}
    io.write_json(out / "report.json", report)
    manifest = io.read_json(out / "manifest.json")
    io.write_json(out / "manifest.json", {**manifest, "listed": listed,
                                          "heldout_dir": HELDOUT_DIR})
    return report


def format_yield_table(report: dict) -> str:
    """The yield table as text: one line per repository, then the totals."""
    head = f"{'repository':<28} {'split':<8} {'status':<7} {'tried':>5} {'kept':>5} " \
           f"{'seconds':>8}  rejected / reason"
    lines = [head, "-" * len(head)]

    def line(name, split, status, r):
        why = r.get("reason") or ", ".join(f"{k} {v}" for k, v in r["rejected"].items()) or "-"
        return (f"{name:<28} {split:<8} {status:<7} {r['tried']:>5} {r['kept']:>5} "
                f"{r['seconds']:>8.1f}  {why[:120]}")

    for r in report["yield"]:
        lines.append(line(f"{r['repo']} {r['version']}", r["split"], r["status"], r))
    t = report["totals"]
    lines.append("-" * len(head))
    lines.append(line(f"total ({t['ok']}/{t['repos']} minted)", "", "", t))
    return "\n".join(lines)
