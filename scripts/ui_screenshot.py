"""Screenshot a flow run's page in the Prefect UI with headless Chromium (Debian `chromium`).

Usage:
    python scripts/ui_screenshot.py --api-url http://127.0.0.1:4200/api \
        [--flow-run-id ID | --flow nightly] --out docs/nightly_run.png

Without --flow-run-id the latest run of --flow (default ``nightly``) is taken. The UI is
served by the same server at the API URL without ``/api``. Chromium runs with a fresh
profile directory, no sandbox (we run as root), no GPU, no background networking, and a
virtual-time budget so the single-page app has rendered before the capture. A PNG above
--max-kb is re-encoded with a reduced palette (Pillow) so it stays small enough to commit.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import httpx

CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
)


def latest_flow_run(api: str, flow: str) -> str:
    """Id of the newest run of the named flow."""
    body = {"flows": {"name": {"any_": [flow]}}, "sort": "START_TIME_DESC", "limit": 1}
    resp = httpx.post(f"{api}/flow_runs/filter", json=body, timeout=10)
    resp.raise_for_status()
    runs = resp.json()
    if not runs:
        raise SystemExit(f"no run of flow {flow!r} on {api}")
    return runs[0]["id"]


def screenshot(url: str, out: Path, *, size: str, budget_ms: int, timeout_s: float) -> None:
    """Render url in headless Chromium and write a PNG to out."""
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if not exe:
        raise SystemExit("chromium not found: apt-get install -y chromium")
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="codeloop-chromium-") as profile:
        cmd = [
            exe,
            *CHROMIUM_FLAGS,
            f"--user-data-dir={profile}",
            f"--screenshot={out.resolve()}",
            f"--window-size={size}",
            f"--virtual-time-budget={budget_ms}",
            url,
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    if not out.exists():
        raise SystemExit(f"chromium wrote no screenshot (exit {proc.returncode}):\n{proc.stderr}")


def shrink(path: Path, max_kb: int) -> None:
    """Re-encode with a 64-colour palette when the PNG is larger than max_kb."""
    if path.stat().st_size <= max_kb * 1024:
        return
    try:
        from PIL import Image
    except ImportError:
        print(f"{path}: {path.stat().st_size // 1024} KB > {max_kb} KB; install Pillow to shrink")
        return
    with Image.open(path) as img:
        small = img.convert("RGB").quantize(colors=64)
    small.save(path, optimize=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--api-url", default="http://127.0.0.1:4200/api")
    ap.add_argument("--flow-run-id", default="")
    ap.add_argument("--flow", default="nightly")
    ap.add_argument("--out", default="docs/nightly_run.png")
    ap.add_argument("--window-size", default="1400,1000")
    ap.add_argument("--budget-ms", type=int, default=15000, help="virtual time to render")
    ap.add_argument("--timeout-s", type=float, default=120.0)
    ap.add_argument("--max-kb", type=int, default=300)
    args = ap.parse_args(argv)
    api = args.api_url.rstrip("/")
    run_id = args.flow_run_id or latest_flow_run(api, args.flow)
    ui = api.removesuffix("/api")
    url = f"{ui}/runs/flow-run/{run_id}"
    out = Path(args.out)
    screenshot(url, out, size=args.window_size, budget_ms=args.budget_ms, timeout_s=args.timeout_s)
    shrink(out, args.max_kb)
    print(f"{url} -> {out} ({out.stat().st_size // 1024} KB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
