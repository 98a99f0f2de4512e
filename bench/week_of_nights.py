"""A week of nights: the nightly flow run seven times on a fresh clone, against a local
Prefect server, as the scheduled job would run it.

One night is killed with SIGKILL mid-rollout (once some rollout shards are finished) and
the next run must resume it: the same night number, the finished shards reused, no row
lost or duplicated. One night's candidate is deliberately broken: a commit raises
``train.lr`` far past anything sane (the way a bad change lands), and the gate must refuse
that candidate with a clear reason. The next commit reverts it.

Run: ``nice -n 10 .venv/bin/python bench/week_of_nights.py [--work DIR] [--nights 7]
[--kill 3] [--broken 5] [--params FILE] [--name NAME]`` (commit first: the clone is of
HEAD; ``--kill 0 --broken 0`` runs plain nights).

The params are params.yaml's, except ``WEEK_PARAMS`` (a smaller rollout plan and smaller
rollout shards so that the kill lands mid-rollout, and a cap on the frozen sets so a night
fits the 2-core machine) and then ``--params``: a YAML mapping of dotted keys to values
(``clean.repo_tasks.n: 300``), set in the clone's params.yaml and committed before night 1.
Writes metrics/NAME.csv (one row per run, a curve in ``dvc plots show``; NAME defaults to
week_of_nights), docs/NAME.md (the table) and, where Chromium is installed,
docs/NAME.png (the Prefect UI's ``nights`` artifact after the week;
``--from-run 8`` takes it again from the week's server history without running a night).
Each row also has the minutes of every stage (from the night's log), the gate's minimum
detectable drop per set, and for a promoted night the agent's figures: the repository
tasks rolled out, their judged resolved rate and invalid calls per episode, and the
held-out repository tasks' tool-call success.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from codeloop.io import read_trajectories  # noqa: E402
from codeloop.ops.nights import read_nights  # noqa: E402
from codeloop.ops.promote import set_param  # noqa: E402

WEEK_PARAMS = {
    ("bucket", "tasks_per_iteration"): "64",
    ("rollout", "resume_shard_tasks"): "8",
    ("evaluate", "max_tasks_per_set"): "90",
}
BROKEN = ("train", "lr", "0.5")  # 2,500x the default: the update wrecks the policy
SETS = ("heldout", "heldout_repo", "humaneval")


def sh(cmd: list[str], cwd: Path, **kw) -> str:
    return subprocess.run(cmd, cwd=cwd, check=True, capture_output=True, text=True, **kw).stdout


def commit(repo: Path, msg: str) -> None:
    sh(["git", "commit", "-qam", msg], repo)


def clone(work: Path, overrides: dict) -> Path:
    repo = work / "repo"
    sh(["git", "clone", "-q", str(ROOT), str(repo)], work)
    for (section, key), value in WEEK_PARAMS.items():
        set_param(repo / "params.yaml", section, key, value)
    if overrides:
        set_dotted(repo / "params.yaml", overrides)
    commit(repo, "week of nights: smaller plan, shards and frozen sets")
    return repo


def set_dotted(path: Path, overrides: dict) -> None:
    """Set ``{"a.b.c": value}`` keys in a params file (a YAML round trip: the clone's copy
    loses its comments; set_param reaches only top-level sections' scalars)."""
    params = yaml.safe_load(path.read_text())
    for dotted, value in overrides.items():
        *parents, leaf = dotted.split(".")
        node = params
        for k in parents:
            node = node[k]
        if leaf not in node:
            raise KeyError(f"--params: {dotted} is not a key of {path.name}")
        node[leaf] = value
    path.write_text(yaml.safe_dump(params, sort_keys=False))


def start_server(work: Path, port: int) -> subprocess.Popen:
    env = {**os.environ, "PREFECT_HOME": str(work / "prefect"),
           "PREFECT_UI_API_URL": f"http://127.0.0.1:{port}/api",
           "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "DO_NOT_TRACK": "1"}
    log = open(work / "prefect-server.log", "w")
    proc = subprocess.Popen(
        [str(Path(sys.executable).parent / "prefect"), "server", "start", "--host",
         "127.0.0.1", "--port", str(port)], env=env, stdout=log, stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    import httpx

    for _ in range(180):
        try:
            if httpx.get(f"http://127.0.0.1:{port}/api/health", timeout=2).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        time.sleep(1)
    raise RuntimeError(f"the Prefect server on port {port} did not answer: {log.name}")


def night_env(repo: Path, port: int) -> dict[str, str]:
    return {
        **os.environ,
        "PREFECT_API_URL": f"http://127.0.0.1:{port}/api",
        "PYTHONPATH": str(repo),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "DVC_NO_ANALYTICS": "1",
        "DO_NOT_TRACK": "1",
    }


def run_night(repo: Path, env: dict, log: Path, kill: bool) -> dict:
    """One `python -m flows.nightly --no-pull`; with ``kill``, SIGKILLed once two rollout
    shards are finished. Returns what the bench saw."""
    shards = repo / ".dvc/tmp/codeloop-resume/rollout"
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "flows.nightly", "--no-pull"], cwd=repo,
                                env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
        if not kill:
            return {"rc": proc.wait()}
        while proc.poll() is None and len(list(shards.glob("*.parquet"))) < 2:
            time.sleep(1)
        if proc.poll() is not None:
            return {"rc": proc.returncode, "kill": "the night ended before two shards"}
        found = sorted(p.name for p in shards.glob("*.parquet"))
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    return {"rc": proc.returncode, "killed_with_shards": len(found)}


def row_of(run: int, seen: dict, repo: Path, log: Path, killed: bool) -> dict:
    nights = read_nights(repo)
    last = nights[-1] if nights and not killed else {}
    text = log.read_text(errors="replace")
    row = {
        "run": run,
        "night": last.get("night", ""),
        "outcome": "killed" if killed else last.get("outcome", "?"),
        "tag": last.get("tag", ""),
        "minutes": last.get("minutes", seen.get("minutes", "")),
        "kl": last.get("kl", ""),
        "shards_found": _shards_found(text),
        "killed_with_shards": seen.get("killed_with_shards", ""),
    }
    for name in SETS:
        p = (last.get("paired") or {}).get(name) or {}
        row[f"{name}_pass@1"] = (last.get("pass_at_1") or {}).get(name, "")
        row[f"{name}_delta"] = p.get("delta", "")
        row[f"{name}_se"] = p.get("se", "")
        row[f"{name}_verdict"] = p.get("verdict", "")
        row[f"{name}_mdd"] = p.get("mdd", "")
    row.update(_trajectory_counts(repo) if row["outcome"] == "promoted" else
               {"rows": "", "unique_rows": ""})
    row.update(_agent_figures(repo) if row["outcome"] == "promoted" else {})
    row.update({f"{k}_min": v for k, v in stage_minutes(text).items()})
    row["reasons"] = " | ".join(last.get("reasons") or []) if last else seen.get("kill", "")
    return row


def _shards_found(text: str) -> int | str:
    for line in text.splitlines():
        if "finished shards of a killed run found" in line:
            return int(line.split(" finished shards")[0].split()[-1])
    return ""


STAGES = ("clean", "policy_init", "sft", "bucket", "rollout", "score", "critic", "train",
          "evaluate")


def stage_minutes(text: str) -> dict[str, float | str]:
    """Minutes of each stage's Prefect task in a nightly's log, from its first line to its
    ``Finished in state`` line ("" where the log lacks it: a killed or failed night)."""
    first: dict[str, datetime] = {}
    out: dict[str, float | str] = dict.fromkeys(STAGES, "")
    for line in text.splitlines():
        for stage in STAGES:
            tag = f"Task run 'repro_stage[{stage}]' - "
            if tag not in line:
                continue
            try:
                at = datetime.strptime(line[:12], "%H:%M:%S.%f")
            except ValueError:
                continue
            first.setdefault(stage, at)
            if line.split(tag, 1)[1].startswith("Finished in state"):
                secs = (at - first[stage]).total_seconds() % 86400  # past midnight
                out[stage] = round(secs / 60, 2)
    return out


def _agent_figures(repo: Path) -> dict:
    """A promoted night's agent figures from the metrics it committed: repository tasks
    rolled out, their resolved rate and invalid calls per episode (score), held-out
    repository tasks' tool-call success and invalid-call rate (evaluate), SFT's agent
    examples and seconds."""
    def read(name: str) -> dict:
        f = repo / "metrics" / f"{name}.json"
        return json.loads(f.read_text()) if f.exists() else {}

    score, ev, sft = read("score"), read("eval"), read("sft")
    repo_rows = (score.get("kinds") or {}).get("repo") or {}
    comp = repo_rows.get("components") or {}
    held = (ev.get("sets") or {}).get("heldout_repo") or {}
    return {
        "rollout_agent_episodes": repo_rows.get("n_trajectories", 0),
        "rollout_agent_resolved": (comp.get("resolved") or {}).get("mean", ""),
        "rollout_agent_invalid_calls": (comp.get("invalid_calls") or {}).get("mean", ""),
        "heldout_repo_tasks": held.get("n_tasks", ""),
        "heldout_repo_tool_success": held.get("tool_call_success_rate", ""),
        "heldout_repo_invalid_rate": held.get("invalid_call_rate", ""),
        "sft_agent_examples": sft.get("agent_examples", ""),
        "sft_seconds": sft.get("seconds", ""),
    }


def _trajectory_counts(repo: Path) -> dict:
    trajs = read_trajectories(repo / "data/trajectories")
    return {"rows": len(trajs), "unique_rows": len({t.trajectory_id for t in trajs})}


def republish_nights(repo: Path, port: int) -> None:
    """The week's own nights log, published once more by this checkout's nights table (the
    clone's flows published theirs as each night ended)."""
    os.environ["PREFECT_API_URL"] = f"http://127.0.0.1:{port}/api"
    from prefect import flow

    from codeloop.ops.nights import nights_table
    from tasks.artifacts import publish_nights

    @flow(name="week-of-nights")
    def week() -> None:
        publish_nights(nights_table(read_nights(repo)))

    week()


def screenshot_nights(port: int, out: Path) -> str:
    """The newest nights table in the Prefect UI (scripts/ui_screenshot.py's headless
    Chromium)."""
    if not (shutil.which("chromium") or shutil.which("chromium-browser")):
        return "no chromium: no screenshot"
    sys.path.insert(0, str(ROOT / "scripts"))
    import httpx
    from ui_screenshot import screenshot, shrink

    api = f"http://127.0.0.1:{port}/api"
    body = {"artifacts": {"key": {"any_": ["nights"]}}, "sort": "CREATED_DESC", "limit": 1}
    [latest] = httpx.post(f"{api}/artifacts/filter", json=body, timeout=10).json()
    url = f"http://127.0.0.1:{port}/artifacts/artifact/{latest['id']}"
    screenshot(url, out, size="1600,1000", budget_ms=20000, timeout_s=180)
    shrink(out, 300)
    return f"{out} ({url})"


def _cell(value) -> str:
    """A table cell: numbers to 4 decimals (rows read back from the CSV are strings)."""
    if isinstance(value, int) or (isinstance(value, str) and value.isdigit()):
        return str(value)
    try:
        return f"{float(value):.4f}"
    except (TypeError, ValueError):
        return str(value)


WEEK_COLS = ["run", "night", "outcome", "tag", "minutes", "kl", "heldout_pass@1",
             "heldout_delta", "heldout_se", "heldout_verdict", "heldout_repo_pass@1",
             "heldout_repo_delta", "heldout_repo_se", "humaneval_delta", "humaneval_se",
             "shards_found", "rows", "unique_rows", "reasons"]
AGENT_COLS = ["run", "night", "minutes", *(f"{s}_min" for s in STAGES), "sft_agent_examples",
              "rollout_agent_episodes", "rollout_agent_resolved", "rollout_agent_invalid_calls",
              "heldout_repo_tasks", "heldout_repo_pass@1", "heldout_repo_delta",
              "heldout_repo_se", "heldout_repo_mdd", "heldout_repo_verdict",
              "heldout_repo_tool_success"]


def _table(rows: list[dict], cols: list[str]) -> str:
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        cells = [_cell(r.get(c, "")) for c in cols]
        lines.append("| " + " | ".join(c.replace("|", "/") for c in cells) + " |")
    return "\n".join(lines)


def write_outputs(rows: list[dict], name: str, overrides: dict) -> None:
    fields = list(dict.fromkeys(k for r in rows for k in r))  # every row's keys, in order
    with open(ROOT / f"metrics/{name}.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields, restval="")
        w.writeheader()
        w.writerows(rows)
    week = {".".join(k): v for k, v in WEEK_PARAMS.items()}
    title = name.replace("_", " ").capitalize()
    (ROOT / f"docs/{name}.md").write_text(
        f"# {title}\n\nWritten by `bench/week_of_nights.py` "
        f"(params.yaml with {json.dumps(week)}, then {json.dumps(overrides)}; "
        f"the broken night commits {BROKEN[0]}.{BROKEN[1]}: {BROKEN[2]}).\n\n"
        + _table(rows, WEEK_COLS)
        + "\n\nMinutes per stage and the agent's figures (`*_min` from the night's log; the "
        "agent's from a promoted night's metrics):\n\n"
        + _table(rows, AGENT_COLS) + "\n"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", default="/tmp/codeloop-week")
    ap.add_argument("--nights", type=int, default=7)
    ap.add_argument("--kill", type=int, default=3, help="run killed mid-rollout")
    ap.add_argument("--broken", type=int, default=5, help="run with a broken candidate")
    ap.add_argument("--port", type=int, default=4260)
    ap.add_argument("--from-run", type=int, default=1,
                    help="go on with this run in --work (its server's history kept), the "
                    "earlier runs' rows read back from metrics/NAME.csv")
    ap.add_argument("--params", default="",
                    help="YAML file of dotted params keys to values, set in the clone")
    ap.add_argument("--name", default="week_of_nights",
                    help="output names: metrics/NAME.csv, docs/NAME.md, docs/NAME.png")
    ap.add_argument("--screenshot", action=argparse.BooleanOptionalAction, default=True,
                    help="the UI's nights table as docs/NAME.png (needs Chromium)")
    args = ap.parse_args()
    work = Path(args.work)
    overrides = yaml.safe_load(Path(args.params).read_text()) if args.params else {}
    rows: list[dict] = []
    if args.from_run == 1:
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        repo = clone(work, overrides)
    else:
        repo = work / "repo"
        with open(ROOT / f"metrics/{args.name}.csv") as f:
            rows = [r for r in csv.DictReader(f) if int(r["run"]) < args.from_run]
    server = start_server(work, args.port)
    try:
        env = night_env(repo, args.port)
        old_lr = None
        for run in range(args.from_run, args.nights + 1):
            if run == args.broken:
                old_lr = set_param(repo / "params.yaml", *BROKEN)
                commit(repo, f"deliberately broken: {BROKEN[0]}.{BROKEN[1]} {BROKEN[2]}")
            t0 = time.monotonic()
            log = work / f"run-{run}.log"
            seen = run_night(repo, env, log, kill=run == args.kill)
            seen["minutes"] = round((time.monotonic() - t0) / 60, 2)
            rows.append(row_of(run, seen, repo, log, killed=run == args.kill))
            print(json.dumps(rows[-1]), flush=True)
            if run == args.broken:
                set_param(repo / "params.yaml", BROKEN[0], BROKEN[1], old_lr)
                commit(repo, f"revert the broken {BROKEN[0]}.{BROKEN[1]}")
            write_outputs(rows, args.name, overrides)
        write_outputs(rows, args.name, overrides)
        republish_nights(repo, args.port)
        if args.screenshot:
            print(screenshot_nights(args.port, ROOT / f"docs/{args.name}.png"), flush=True)
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=60)


if __name__ == "__main__":
    main()
