"""Host-side helpers for repository-task tests: write a tree, `git apply` a patch, run
real pytest and read its per-test outcomes from the JUnit XML (not from stdout)."""

from __future__ import annotations

import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path


def write_tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return root


def git_apply(root: Path, patch: str) -> None:
    if patch:
        subprocess.run(["git", "apply", "-"], cwd=root, input=patch.encode(), check=True)


def pytest_outcomes(root: Path) -> dict[str, str]:
    """node id -> passed | failed | error | skipped for every test pytest collected."""
    xml = root.parent / f"{root.name}-junit.xml"
    subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={xml}"],
        cwd=root, capture_output=True, check=False,
    )
    out = {}
    for case in ET.parse(xml).getroot().iter("testcase"):
        path = case.get("classname", "").replace(".", "/") + ".py"
        state = "passed"
        for tag in ("failure", "error", "skipped"):
            if case.find(tag) is not None:
                state = {"failure": "failed"}.get(tag, tag)
        out[f"{path}::{case.get('name')}"] = state
    return out
