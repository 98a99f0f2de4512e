"""scripts/prefect_server.sh (sourced by scripts/run.sh): the UI it advertises can reach
its API, because the server is told its own API URL instead of the default :4200."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests._prefect_server import server_env
from tests._toy_pipeline import REPO_ROOT

pytestmark = pytest.mark.slow

# Sources the script, then prints the API URL it exported and the UI's /ui-settings.
PROBE = """
source scripts/prefect_server.sh >/dev/null
python - <<'PY'
import json, os, urllib.request
api = os.environ["PREFECT_API_URL"]
with urllib.request.urlopen(api.removesuffix("/api") + "/ui-settings", timeout=10) as r:
    print(json.dumps({"api": api, "settings": json.load(r)}))
PY
"""


@pytest.fixture(scope="module")
def sourced(tmp_path_factory) -> dict:
    env = server_env(str(tmp_path_factory.mktemp("prefect-home")))
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    proc = subprocess.run(["bash", "-c", PROBE], cwd=REPO_ROOT, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_the_script_serves_on_a_port_other_than_the_default(sourced):
    assert not sourced["api"].startswith("http://127.0.0.1:4200/")


def test_the_ui_settings_name_the_servers_own_api_url(sourced):
    assert sourced["settings"]["api_url"] == sourced["api"]
