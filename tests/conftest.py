"""Shared test fixtures: a real Prefect harness, isolated homes, repo paths.

Environment is set at import time, before any test module imports prefect, so no test
ever writes into the developer's ~/.prefect or phones home.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

import pytest

_PREFECT_HOME = tempfile.mkdtemp(prefix="codeloop-prefect-home-")
os.environ.setdefault("PREFECT_HOME", _PREFECT_HOME)
# ours alone is removed at exit (one was left in /tmp per test session before)
atexit.register(shutil.rmtree, _PREFECT_HOME, ignore_errors=True)
os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
os.environ["DO_NOT_TRACK"] = "1"
os.environ["DVC_NO_ANALYTICS"] = "1"
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Tests commit into temp git repos; CI machines may have no identity configured.
for _var, _val in (
    ("GIT_AUTHOR_NAME", "codeloop tests"),
    ("GIT_AUTHOR_EMAIL", "tests@codeloop.invalid"),
    ("GIT_COMMITTER_NAME", "codeloop tests"),
    ("GIT_COMMITTER_EMAIL", "tests@codeloop.invalid"),
):
    os.environ.setdefault(_var, _val)

REPO = Path(__file__).resolve().parents[1]
MBPP_PATH = REPO.parent / "shared" / "data" / "mbpp.jsonl"


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO


@pytest.fixture(scope="session")
def mbpp_path() -> Path:
    """Path of the shared MBPP file; skips the test with the reason when it is absent."""
    if not MBPP_PATH.exists():
        pytest.skip(
            f"MBPP not found at {MBPP_PATH} (it lives in ../shared/data, never in the repo)"
        )
    return MBPP_PATH


@pytest.fixture(scope="session")
def prefect_harness():
    """One real, temporary Prefect server (SQLite) for the whole session."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=90):
        yield


def pytest_collection_modifyitems(config, items):
    """Files holding a slow end-to-end test run first, the rest after, each in its own order.

    On several workers (scripts/test.sh) a file is one unit of work: the long ones started
    first leave the short ones to fill the gaps, instead of one long file running alone at
    the end while the other worker idles.
    """
    slow_files = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow_files)
