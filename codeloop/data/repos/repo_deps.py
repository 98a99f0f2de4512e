"""Mint's environment step: a repository's declared dependencies, installed once from the
package registry into a dir the sealed pytest runs mount read-only.

Declared dependencies come from pyproject.toml (``[project].dependencies``), setup.cfg
(``[options] install_requires``), setup.py (a literal ``install_requires``, or a name bound
to one) and ``requirements*.txt``, plus the ``test``/``tests``/``testing`` extras of each
(what the repository's own suite imports). pytest and its own dependencies are left out: the
sandbox supplies them (codeloop.agent.envdirs). pip resolves the rest with their transitive
dependencies: first offline from the wheel cache (``--no-index --find-links``), and only
when that cannot satisfy them by ``pip download`` from the registry into the cache, so a
later mint is offline. The resolution, every installed distribution pinned ``name==version``,
goes into the tasks' environment spec (codeloop.data.repos.envspec) and the manifest.
"""

from __future__ import annotations

import ast
import configparser
import re
import subprocess
import sys
import tomllib
from pathlib import Path

# the sandbox's own pytest env provides these; a second copy would shadow it
SANDBOX_PROVIDED = {"pytest", "pluggy", "iniconfig"}
TEST_EXTRAS = ("test", "tests", "testing")  # extras a repository's own test suite needs
_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


class DepsError(RuntimeError):
    """The declared dependencies cannot be installed (pip's reason inside)."""


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _from_setup_py(text: str) -> list[str]:
    """``install_requires`` of a setup() call when it is a literal (or a name bound to one)."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return []
    bound = {}
    for n in tree.body:
        if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name):
            bound[n.targets[0].id] = n.value
    for n in ast.walk(tree):
        if not isinstance(n, ast.Call):
            continue
        for kw in n.keywords:
            if kw.arg == "install_requires":
                value = (
                    bound.get(kw.value.id, kw.value) if isinstance(kw.value, ast.Name) else kw.value
                )
                try:
                    got = ast.literal_eval(value)
                except ValueError:
                    return []
                return [got] if isinstance(got, str) else list(got)
    return []


def _setup_py_keyword(text: str, name: str):
    """The literal value of keyword ``name`` of a setup() call (None when not a literal)."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return None
    for n in ast.walk(tree):
        if isinstance(n, ast.Call):
            for kw in n.keywords:
                if kw.arg == name:
                    try:
                        return ast.literal_eval(kw.value)
                    except ValueError:
                        return None
    return None


def _from_requirements(text: str) -> list[str]:
    out = []
    for line in text.splitlines():
        line = line.split(" #", 1)[0].strip()
        if line and not line.startswith(("#", "-")):  # options and -r/-e includes skipped
            out.append(line)
    return out


def declared_requirements(root: str | Path) -> list[str]:
    """The repository's declared runtime (and requirements-file) dependencies, in order,
    without duplicates and without what the sandbox provides."""
    root = Path(root)
    reqs: list[str] = []
    if (root / "pyproject.toml").is_file():
        project = tomllib.loads((root / "pyproject.toml").read_text()).get("project", {})
        reqs += list(project.get("dependencies", []) or [])
        extras = project.get("optional-dependencies", {}) or {}
        for key in TEST_EXTRAS:
            reqs += list(extras.get(key, []) or [])
    if (root / "setup.cfg").is_file():
        cp = configparser.ConfigParser()
        cp.read(root / "setup.cfg")
        reqs += _from_requirements(cp.get("options", "install_requires", fallback=""))
        for key in TEST_EXTRAS:
            reqs += _from_requirements(cp.get("options.extras_require", key, fallback=""))
    if (root / "setup.py").is_file():
        text = (root / "setup.py").read_text()
        reqs += _from_setup_py(text)
        extras = _setup_py_keyword(text, "extras_require")
        for key in TEST_EXTRAS if isinstance(extras, dict) else ():
            got = extras.get(key, [])
            reqs += [got] if isinstance(got, str) else list(got)
    for f in sorted(root.glob("requirements*.txt")):
        reqs += _from_requirements(f.read_text())
    out, seen = [], set()
    for r in reqs:
        m = _NAME.match(r)
        if not m or _norm(m.group(1)) in SANDBOX_PROVIDED or r in seen:
            continue
        seen.add(r)
        out.append(r.strip())
    return out


def requires_python(root: str | Path) -> str:
    """The repository's declared ``requires-python`` (pyproject's ``[project]``, setup.cfg's
    ``python_requires``, a literal in setup.py); '' when it declares none."""
    root = Path(root)
    if (root / "pyproject.toml").is_file():
        project = tomllib.loads((root / "pyproject.toml").read_text()).get("project", {})
        if project.get("requires-python"):
            return str(project["requires-python"])
    if (root / "setup.cfg").is_file():
        cp = configparser.ConfigParser()
        cp.read(root / "setup.cfg")
        got = cp.get("options", "python_requires", fallback="").strip()
        if got:
            return got
    if (root / "setup.py").is_file():
        got = _setup_py_keyword((root / "setup.py").read_text(), "python_requires")
        if isinstance(got, str):
            return got
    return ""


def tree_paths(root: str | Path) -> list[str]:
    """Dirs of the tree its code is imported from besides its root: ``["src"]`` for a src
    layout (a package or module under ``src/`` and none of that name at the root), which
    an editable install would put on sys.path; [] for a flat layout."""
    root = Path(root)
    src = root / "src"
    if not src.is_dir():
        return []
    names = [p.name if p.is_dir() else p.stem for p in sorted(src.iterdir())
             if (p.is_dir() and (p / "__init__.py").is_file()) or (p.is_file() and p.suffix == ".py")]
    if not names or any((root / n).exists() or (root / f"{n}.py").exists() for n in names):
        return []
    return ["src"]


def _pip(args: list[str]) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input", *args]
    return subprocess.run(cmd, capture_output=True, text=True)


def pinned(target: str | Path) -> list[str]:
    """``name==version`` of every distribution installed in ``target`` (its dist-info)."""
    out = []
    for meta in sorted(Path(target).glob("*.dist-info/METADATA")):
        fields = dict(
            line.split(": ", 1) for line in meta.read_text().splitlines()[:20] if ": " in line
        )
        if "Name" in fields and "Version" in fields:
            out.append(f"{_norm(fields['Name'])}=={fields['Version']}")
    return sorted(out)


def install_requirements(reqs: list[str], cache: str | Path, target: str | Path) -> list[str]:
    """Install ``reqs`` and their dependencies into ``target`` (``pip install --target``),
    from the wheel cache when it has them, else downloading them into it first; returns
    the pinned resolution. DepsError with pip's reason when it cannot."""
    if not reqs:
        return []
    cache = Path(cache).resolve()
    cache.mkdir(parents=True, exist_ok=True)
    install = ["install", "--no-index", "--find-links", str(cache), "--target", str(target),
               "--no-compile", "--prefer-binary", *reqs]
    proc = _pip(install)
    if proc.returncode != 0:  # not all in the cache yet: fetch from the registry, once
        dl = _pip(["download", "--dest", str(cache), "--prefer-binary", *reqs])
        if dl.returncode != 0:
            raise DepsError(f"pip download {' '.join(reqs)} failed: {dl.stderr.strip()[-800:]}")
        proc = _pip(install)
        if proc.returncode != 0:
            raise DepsError(f"pip install {' '.join(reqs)} failed: {proc.stderr.strip()[-800:]}")
    return pinned(target)
