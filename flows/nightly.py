"""The nightly run: pull, reproduce every stage, gate, promote, push, commit and tag.

Run once:   ``python -m flows.nightly``            (in the repo root; no server needed)
Serve:      ``python -m flows.nightly --serve``    (cron ``0 2 * * *``; needs a Prefect
            server: ``prefect server start`` and ``PREFECT_API_URL`` pointing at it), or
            ``prefect deploy --all`` with prefect.yaml and a process worker.

With pull or push on, the night first checks that the default DVC remote answers
(``check_remote``: one listing, codeloop.ops.remote) and fails before any stage runs,
naming the remote and its URL, when it does not: the push comes after the promotion, so
an unreachable remote must not be found out there.

Each dvc.yaml stage is one Prefect task (``repro_stage``, its run named ``repro_stage[<stage>]``) running ``dvc repro
--single-item <stage>`` with its output streamed into the task's log. Transient
failures (DVC remote, lock) are retried; deterministic ones are not. A workspace lock
keeps two runs apart. If any stage fails or the gate refuses, the tracked files the run
touched are restored and ``dvc checkout`` brings back the last good iteration's data:
nothing is promoted, committed or tagged.

A promoted night also appends its scored trajectories to data/archive/ (retention
applied, ``dvc add``ed and committed with the tag: codeloop.ops.archiving). Before the
stages, history/archive_manifest.json (where tracked) is rewritten to the archive as pulled:
the earlier nights train may read (replay, RFT), its dvc dep, committed with the promotion.

Before the stages run, ``rollout.iteration`` (the bucket plan's and the sampling seed
stream's position) is set to the next *night* number: one more than the committed value,
the last promoted iteration and the last night tried in this workspace (remembered in
``.dvc/tmp/codeloop-nights.json``, untracked). A refused night's params edit is undone
like everything else, but the next night still samples anew instead of rebuilding the
identical, already refused candidate. Tags ``iter-NNNN`` count promotions, so after a
refusal ``rollout.iteration`` runs ahead of the tag number; the promoted commit's
params.yaml records the value that was used.

A run killed mid-night (SIGKILL, a lost machine, or stopped by a signal it sees: SIGTERM from
a cancelled job, Ctrl-C) leaves that state marked ``running``; the next run puts the tracked
files back as the last good iteration left them and runs the same night number again, so
rollout and score reuse the shards the killed run finished (codeloop.rollout.resume). Every
night, promoted, refused, failed or killed, is appended to the nights log
(codeloop.ops.nights) and the last week is published as the ``nights`` artifact.
"""

from __future__ import annotations

import argparse
import logging
import re
import shutil
import time
from pathlib import Path
from typing import Any

import yaml
from prefect import flow, task
from prefect.logging import get_run_logger

from codeloop.config import load_params
from codeloop.data.archive import MANIFEST, snapshot
from codeloop.evaluate.history import pass_rates_from_trajectories, read_iterations, tag_for
from codeloop.io import read_json, read_trajectories, write_json
from codeloop.ops.archiving import archive_night, undo_archive
from codeloop.ops.nights import append_night, night_row, nights_table, read_nights
from codeloop.ops.promote import promote, set_param
from codeloop.ops.vcs import clear_stale_dvc_locks, dvc, git, require_clean, workspace_lock
from codeloop.paths import Paths
from codeloop.stages import evaluate as evaluate_stage
from tasks.artifacts import publish_nights
from tasks.ops import check_remote, dvc_pull, dvc_push, repro_stage, with_retry_delay
from tasks.steps import as_task, stage_logs

PIPELINE = (
    "clean",
    "policy_init",
    "sft",
    "bucket",
    "rollout",
    "score",
    "critic",
    "train",
    "evaluate",
)
# Tracked paths a night may modify; restored from HEAD when the night fails.
TOUCHED = ("dvc.lock", "params.yaml", "metrics", "history", "models/.gitignore", "data/.gitignore")
# Untracked memory of the last night tried here (survives the restore of a refused night).
NIGHTS_STATE = Path(".dvc/tmp/codeloop-nights.json")


def _paths(entries: list, params: dict) -> list[str]:
    """dvc.yaml deps/outs entries (strings or one-key dicts) with ${a.b} resolved."""

    def resolve(m: re.Match) -> str:
        val: Any = params
        for key in m.group(1).split("."):
            val = (val or {}).get(key) if isinstance(val, dict) else None
        return str(val) if val is not None else m.group(0)

    names = [e if isinstance(e, str) else next(iter(e)) for e in entries or []]
    return [re.sub(r"\$\{\s*([\w.]+)\s*\}", resolve, n).rstrip("/") for n in names]


def _under(a: str, b: str) -> bool:
    return a == b or a.startswith(b + "/") or b.startswith(a + "/")


def stage_order(repo: Path) -> list[str]:
    """dvc.yaml's stages in dependency order (a stage after every stage whose outs it
    reads); ties in PIPELINE order, then dvc.yaml order."""
    stages = (yaml.safe_load((repo / "dvc.yaml").read_text()) or {}).get("stages", {})
    params = yaml.safe_load((repo / "params.yaml").read_text()) or {}
    outs = {
        n: _paths([*s.get("outs", []), *s.get("metrics", []), *s.get("plots", [])], params)
        for n, s in stages.items()
    }
    deps = {n: _paths(s.get("deps", []), params) for n, s in stages.items()}
    needs = {
        b: {a for a in stages if a != b and any(_under(d, o) for d in deps[b] for o in outs[a])}
        for b in stages
    }
    rank = {
        n: (PIPELINE.index(n) if n in PIPELINE else len(PIPELINE), i) for i, n in enumerate(stages)
    }
    order: list[str] = []
    while len(order) < len(stages):
        ready = [n for n in stages if n not in order and needs[n] <= set(order)]
        if not ready:
            raise ValueError(f"dvc.yaml: stages depend on each other in a cycle: {needs}")
        order.append(min(ready, key=rank.__getitem__))
    return order


def next_night(repo: Path) -> int | None:
    """The rollout.iteration tonight uses; None when params.yaml has no such key."""
    rollout = (yaml.safe_load((repo / "params.yaml").read_text()) or {}).get("rollout") or {}
    if "iteration" not in rollout:
        return None
    state = repo / NIGHTS_STATE
    tried = int(read_json(state).get("last_rollout_iteration", 0)) if state.exists() else 0
    last = read_iterations(Paths(repo).iterations_csv)
    promoted = int(last[-1]["iteration"]) if last else 0
    return max(int(rollout["iteration"]), tried, promoted) + 1


@task
def bump_iteration(repo: str, night: int | None = None) -> int | None:
    """Set rollout.iteration to the next night number so tonight samples anew (or to
    ``night``: an interrupted night run again, whose finished rollout shards are reused)."""
    base = Path(repo)
    night = night if night is not None else next_night(base)
    if night is None:
        get_run_logger().warning("params.yaml has no rollout.iteration: nothing to bump")
        return None
    old = set_param(base / "params.yaml", "rollout", "iteration", str(night))
    write_json(base / NIGHTS_STATE, {"last_rollout_iteration": night, "running": True})
    get_run_logger().info("rollout.iteration %s -> %d", old, night)
    return night


def _night_over(repo: str) -> None:
    """Mark the night's run as ended (whatever its outcome): only a killed run leaves
    ``running`` set for the next run to find."""
    state = Path(repo) / NIGHTS_STATE
    if state.exists():
        write_json(state, {**read_json(state), "running": False})


def interrupted_night(repo: str) -> int | None:
    """The night a killed run left unfinished (we hold the lock, so its run is dead), or
    None. Its stale DVC stage locks are dropped, its tracked files put back as the last
    good iteration left them; its finished rollout and score shards (.dvc/tmp) stay, so
    running it again resumes."""
    state = Path(repo) / NIGHTS_STATE
    st = read_json(state) if state.exists() else {}
    if not st.get("running"):
        return None
    clear_stale_dvc_locks(repo)
    _restore(repo)
    return int(st["last_rollout_iteration"])


def gate(repo: str) -> dict[str, Any]:
    """Recompute the gate from metrics/eval.json and history: the evaluate stage's own
    ``gate`` (one copy), run as the task ``gate`` with its artifacts."""
    paths = Paths(Path(repo))
    params = load_params(paths.root / "params.yaml")
    ev = read_json(paths.metrics("evaluate"))
    with stage_logs():
        return as_task(evaluate_stage.gate, params, paths, ev, int(ev["iteration"]))


@task
def promote_candidate(repo: str, row: dict[str, Any]) -> list[str]:
    trajs = Paths(Path(repo)).trajectories_dir
    rates = pass_rates_from_trajectories(read_trajectories(trajs)) if trajs.exists() else {}
    return promote(Path(repo), int(row["iteration"]), row, rates)


@task
def archive(repo: str) -> tuple[list[str], dict[str, Any] | None]:
    """Append the promoted night's trajectories to data/archive/ (codeloop.ops.archiving)."""
    files, counts = archive_night(repo)
    if counts is not None:
        get_run_logger().info("archive: %s", counts)
    return files, counts


@task
def snapshot_archive(repo: str) -> None:
    """Pin the archive train may read tonight (history/archive_manifest.json, train's dvc
    dep), where the project tracks that file; committed with the promotion."""
    path = Path(repo) / MANIFEST
    if path.exists():
        write_json(path, snapshot(Paths(Path(repo)).archive_dir))


@task
def commit_and_tag(repo: str, files: list[str], row: dict[str, Any]) -> str:
    tag = tag_for(int(row["iteration"]))
    paths = [
        p
        for p in ("dvc.lock", "metrics", "data/.gitignore", MANIFEST, *files)
        if (Path(repo) / p).exists()
    ]
    git(repo, "add", "--", *paths)
    p1 = ", ".join(f"{k}={v:.4f}" for k, v in row["pass_at_1"].items())
    git(repo, "commit", "-q", "-m", f"{tag}: promote {row['model_version'][:12]} ({p1})")
    git(repo, "tag", "-a", tag, "-m", f"codeloop iteration {row['iteration']}")
    return git(repo, "rev-parse", "HEAD").strip()


def _restore(repo: str) -> None:
    """Put back the last good iteration: tracked files from HEAD, data via dvc checkout."""
    present = [p for p in TOUCHED if git(repo, "ls-files", "--", p).strip()]
    if present:
        git(repo, "checkout", "HEAD", "--", *present)
    if "dvc.lock" not in present:
        # Nothing was ever reproduced and committed: there is no good data to bring
        # back, and tonight's partial dvc.lock must not pass for one.
        (Path(repo) / "dvc.lock").unlink(missing_ok=True)
        return
    dvc(repo, "checkout", "--force")


def _restore_after_failure(repo: str, log: logging.Logger | logging.LoggerAdapter) -> None:
    """Restore, but never let a restore error hide the failure that caused it."""
    try:
        _restore(repo)
    except Exception as exc:  # logged loudly; the stage's own error is re-raised
        log.error("restoring the last good iteration failed too: %s", exc)


def log_night(repo: str, started: float, outcome: str, seen: dict[str, Any],
              result: dict[str, Any] | None = None, error: str = "") -> None:
    """Append tonight to the nights log (it survives the restore) and publish the week.
    ``seen`` is what the night recorded before any restore: its number and train metrics."""
    result = result or {}
    row = night_row(
        seen.get("night"), outcome, (time.monotonic() - started) / 60, result.get("decision"),
        seen.get("train"), tag=result.get("tag", ""), error=error,
    )
    append_night(repo, row)
    publish_nights(nights_table(read_nights(repo)))


@flow(name="nightly")
def nightly(repo: str = ".", pull: bool = True, push: bool = True) -> dict[str, Any]:
    """One iteration: returns {"promoted", "tag", "decision", "commit", "candidate"
    (its model_version), "rollout_iteration" (the night number used)}. Every night,
    whatever its outcome, is appended to the nights log (codeloop.ops.nights)."""
    repo = str(Path(repo).resolve())
    with workspace_lock(repo):
        started, seen = time.monotonic(), {"night": interrupted_night(repo)}
        if seen["night"] is not None:
            get_run_logger().warning("night %d was killed mid-run: running it again, "
                                     "reusing its finished shards", seen["night"])
            append_night(repo, night_row(seen["night"], "killed", 0.0,
                                         error="the run was killed; resumed by the next run"))
        try:
            result = _night(repo, pull, push, seen)
        except Exception as exc:
            _night_over(repo)
            log_night(repo, started, "failed", seen, error=f"{type(exc).__name__}: {exc}")
            raise
        # A signal (Prefect's TerminationSignal, KeyboardInterrupt: not Exceptions) skips
        # both: the night stays ``running``, its files half-written, for the next run to
        # restore and resume as it does a SIGKILLed one.
        _night_over(repo)
        outcome = "promoted" if result["promoted"] else "refused"
        log_night(repo, started, outcome, seen, result)
        return result


def _night(repo: str, pull: bool, push: bool, seen: dict[str, Any]) -> dict[str, Any]:
    """The night itself, under the workspace lock; ``seen`` gets the night number and the
    train stage's metrics as soon as they exist (a restore would put back older ones)."""
    log = get_run_logger()
    require_clean(repo, "nightly run")
    if pull or push:
        with_retry_delay(check_remote)(repo)
    if pull:
        with_retry_delay(dvc_pull)(repo)
    try:
        night = seen["night"] = bump_iteration(repo, seen.get("night"))
        snapshot_archive(repo)
        train = Paths(Path(repo)).metrics("train")
        for stage in stage_order(Path(repo)):
            repro_stage.with_options(task_run_name=f"repro_stage[{stage}]")(repo, stage)
            if stage == "train" and train.exists():
                seen["train"] = read_json(train)
        verdict = gate(repo)
    except Exception:
        log.error("a stage failed: restoring the last good iteration")
        _restore_after_failure(repo, log)
        raise
    row, decision = verdict["row"], verdict["decision"]
    if not decision["promote"]:
        log.warning("gate refused; last good iteration left untouched")
        _restore(repo)
        return {
            "promoted": False,
            "tag": "",
            "decision": decision,
            "commit": "",
            "candidate": row["model_version"],
            "rollout_iteration": night,
        }
    files = promote_candidate(repo, row)
    counts = None
    try:
        # archive_night undoes its own partial work; a push failure undoes it here.
        archived, counts = archive(repo)
        files = [*files, *archived]
        if push:
            with_retry_delay(dvc_push)(repo)
    except Exception:
        if counts is not None:
            undo_archive(repo, counts["iterations"])
        tag = tag_for(int(row["iteration"]))
        shutil.rmtree(Path(repo) / "models" / tag, ignore_errors=True)
        (Path(repo) / "models" / f"{tag}.dvc").unlink(missing_ok=True)
        _restore_after_failure(repo, log)
        raise
    commit = commit_and_tag(repo, files, row)
    log.info("promoted %s at %s", tag_for(int(row["iteration"])), commit[:12])
    return {
        "promoted": True,
        "tag": tag_for(int(row["iteration"])),
        "decision": decision,
        "commit": commit,
        "candidate": row["model_version"],
        "rollout_iteration": night,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description="codeloop nightly iteration")
    ap.add_argument("--serve", action="store_true", help="serve on a cron schedule")
    ap.add_argument("--cron", default="0 2 * * *", help="schedule when serving")
    ap.add_argument("--no-pull", action="store_true")
    ap.add_argument("--no-push", action="store_true")
    args = ap.parse_args()
    if args.serve:
        nightly.serve(
            name="nightly",
            cron=args.cron,
            parameters={
                "repo": str(Path.cwd()),
                "pull": not args.no_pull,
                "push": not args.no_push,
            },
        )
    else:
        nightly(pull=not args.no_pull, push=not args.no_push)


if __name__ == "__main__":
    main()
