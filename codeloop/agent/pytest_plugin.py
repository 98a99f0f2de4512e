"""Our pytest plugin (stdlib + pytest only; runs inside the sandbox, loaded with ``-p``).

It reports each test's outcome as one JSON line on the result fd (``CODELOOP_RESULT_FD``,
fd 3 of a sandboxed command) instead of anyone parsing pytest's stdout, which the tested
code can print anything to. It is loaded before any conftest, and takes the fd over at
import (dup to a fresh fd, then fd 3 is closed) so a later ``os.write(3, ...)`` hits
nothing. That is not yet a trusted channel: code in the same process can still find the
dup'd fd; the verdict that scores comes from the judge (codeloop.agent.judge), and this
channel carries only the agent's own view of its visible tests.

``batch(spec)`` runs several pytest sessions in one process start-up (testrun.run_batched):
pytest is imported once, then each run is a forked child that enters its own tree and calls
``pytest.main``; its lines carry ``"run": i``. A run's code could write lines for another
run, so batches are only for trees of ours (clean's verification, mint's candidates), never
for an agent's or a model's code.
"""

import json
import os

_FD = None
_RUN = None  # the batch run this process reports for (None: a plain pytest command)
try:
    _fd3 = int(os.environ.get("CODELOOP_RESULT_FD", "3"))
    _FD = os.dup(_fd3)
    os.close(_fd3)
except (OSError, ValueError):
    _FD = None
MAX_REPR = 6000


def _emit(obj):
    if _FD is None:
        return
    if _RUN is not None:
        obj = {**obj, "run": _RUN}
    data = (json.dumps(obj) + "\n").encode("utf-8", "replace")
    while data:
        data = data[os.write(_FD, data) :]


def _repr(report):
    try:
        text = report.longreprtext or ""
    except Exception:  # noqa: BLE001 - a hostile longrepr must not break the report
        text = ""
    return text[-MAX_REPR:]


def tree_paths(env_dirs):
    """The tree dirs the env dirs' spec.json name (``tree_paths``: a src layout's ``src``),
    in order, once each; an env dir without one names none."""
    out = []
    for d in env_dirs:
        try:
            with open(os.path.join(d, "spec.json"), encoding="utf-8") as fh:
                got = json.load(fh).get("tree_paths", [])
        except (OSError, ValueError, AttributeError):
            continue
        out += [p for p in got if isinstance(p, str) and p not in out] if isinstance(got, list) else []
    return out


def pytest_load_initial_conftests(early_config):
    """The tree's own import dirs (its env's ``tree_paths``) go on sys.path right after the
    tree's root, before any conftest or test module is imported: what an editable install
    of a src layout gives its tests."""
    import sys

    root = os.getcwd()
    at = sys.path.index(root) + 1 if root in sys.path else 0
    envs = [d for d in os.environ.get("PYTHONPATH", "").split(os.pathsep) if d]
    for rel in reversed(tree_paths(envs)):
        path = os.path.join(root, rel)
        if path not in sys.path:
            sys.path.insert(at, path)


def pytest_collectreport(report):
    if report.failed:
        _emit({"collect": report.nodeid, "outcome": "error", "longrepr": _repr(report)})


def pytest_runtest_logreport(report):
    msg = {"nodeid": report.nodeid, "when": report.when, "outcome": report.outcome,
           "xfail": bool(getattr(report, "wasxfail", None) is not None)}
    if report.failed:
        msg["longrepr"] = _repr(report)
    _emit(msg)


def pytest_sessionfinish(session, exitstatus):
    _emit({"exitstatus": int(exitstatus), "collected": session.testscollected})


def _child(i, run, argv, base_path):
    """In the forked child: enter run ``i``'s tree, output to its own file, run pytest."""
    global _RUN
    _RUN = i
    os.setpgid(0, 0)
    out = os.open(run["out"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(out, 1)
    os.dup2(out, 2)
    os.close(out)
    code = 3
    try:
        os.chdir(run["dir"])
        import sys

        # what ``python -m pytest`` does: the tree's root first on sys.path
        sys.path[:] = [os.getcwd(), *base_path]
        sys.path_importer_cache.clear()
        import pytest

        ids = run.get("ids")
        plugin = sys.modules[__name__]  # as a plugin object: a by-name -p would re-import
        code = int(pytest.main(argv + (["--", *ids] if ids else []), plugins=[plugin]))
    except BaseException as exc:  # noqa: BLE001 - reported as the run's result, never lost
        _emit({"batch_error": f"{type(exc).__name__}: {exc}"[:2000]})
    finally:
        try:
            import sys

            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def _queue_wait_s(pid):
    """Seconds the threads of process ``pid`` have waited for a CPU (schedstat)."""
    total = 0
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/schedstat") as fh:
                total += int(fh.read().split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return total / 1e9


def _wait(pid, timeout_s):
    """(exit status or None, timed out) of child ``pid``. As the sandbox's own budget
    (codeloop.sandbox.budget), time spent waiting for a CPU is not charged, so load slows a
    run without timing it out; ten times ``timeout_s`` of wall time is the hard cap."""
    import time

    start = time.monotonic()
    delay, waited = 0.002, 0.0
    while True:
        got, status = os.waitpid(pid, os.WNOHANG)
        if got:
            return (os.waitstatus_to_exitcode(status), False)
        elapsed = time.monotonic() - start
        if elapsed >= timeout_s:
            waited = max(waited, _queue_wait_s(pid))
        if elapsed - waited >= timeout_s or elapsed >= 10 * timeout_s:
            try:
                os.killpg(pid, 9)
            except OSError:
                pass
            os.waitpid(pid, 0)
            return (None, True)
        time.sleep(delay)
        delay = min(delay * 2, 0.05)


def batch(spec_path):
    """Run the batch described by the JSON file ``spec_path`` (read, then removed):
    ``{"argv": [pytest args], "timeout": s, "runs": [{"dir", "ids", "out"}, ...]}``; after
    each run one line ``{"run": i, "exit": code}`` or ``{"run": i, "timeout": true}``."""
    import importlib
    import sys
    import time

    global _RUN
    with open(spec_path) as fh:
        spec = json.load(fh)
    os.unlink(spec_path)
    import _pytest.config
    import pytest  # noqa: F401 - imported once here, inherited by every run

    for name in _pytest.config.default_plugins:  # what pytest.main would import, once
        try:
            importlib.import_module("_pytest." + name)
        except ImportError:
            pass
    import gc

    # what is loaded now lives as long as the batch: frozen, the gc.collect()s pytest
    # makes at each session's end (unraisableexception) skip it in every run
    gc.collect()
    gc.freeze()
    base_path = [p for p in sys.path if p not in ("", os.getcwd())]
    for i, run in enumerate(spec["runs"]):
        sys.stdout.flush()
        sys.stderr.flush()
        start = time.monotonic()
        pid = os.fork()
        if pid == 0:
            _child(i, run, list(spec["argv"]), base_path)
        code, timed_out = _wait(pid, float(spec["timeout"]))
        try:  # what the run left behind (its process group) must not run into the next
            os.killpg(pid, 9)
        except OSError:
            pass
        _RUN = i
        ms = round((time.monotonic() - start) * 1000, 1)
        _emit({"timeout": True, "wall_ms": ms} if timed_out else {"exit": code, "wall_ms": ms})
        _RUN = None
