"""Our pytest plugin (stdlib + pytest only; runs inside the sandbox, loaded with ``-p``).

It reports each test's outcome as one JSON line on the result fd (``CODELOOP_RESULT_FD``,
fd 3 of a sandboxed command) instead of anyone parsing pytest's stdout, which the tested
code can print anything to. It is loaded before any conftest, and takes the fd over at
import (dup to a fresh fd, then fd 3 is closed) so a later ``os.write(3, ...)`` hits
nothing. That is not yet a trusted channel: code in the same process can still find the
dup'd fd; the verdict that scores comes from the judge (codeloop.agent.judge), and this
channel carries only the agent's own view of its visible tests.
"""

import json
import os

_FD = None
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
    data = (json.dumps(obj) + "\n").encode("utf-8", "replace")
    while data:
        data = data[os.write(_FD, data) :]


def _repr(report):
    try:
        text = report.longreprtext or ""
    except Exception:  # noqa: BLE001 - a hostile longrepr must not break the report
        text = ""
    return text[-MAX_REPR:]


def pytest_collectreport(report):
    if report.failed:
        _emit({"collect": report.nodeid, "outcome": "error", "longrepr": _repr(report)})


def pytest_runtest_logreport(report):
    msg = {"nodeid": report.nodeid, "when": report.when, "outcome": report.outcome,
           "xfail": bool(getattr(report, "wasxfail", None) is not None)}  # fmt: skip
    if report.failed:
        msg["longrepr"] = _repr(report)
    _emit(msg)


def pytest_sessionfinish(session, exitstatus):
    _emit({"exitstatus": int(exitstatus), "collected": session.testscollected})
