"""Build an environment spec (codeloop.data.repos.envspec) into its env dir, once.

``build_spec_env(spec, envs_root, wheels)`` runs the spec's install commands (pip, with
``--no-index --no-deps --find-links wheels``: offline, exactly the pinned wheels) into a
temporary dir, byte-compiles it for the sandbox's interpreter, writes ``spec.json`` last
and renames the dir to ``envs_root/<spec hash>/``. A dir is complete when its spec.json
hashes to its name (``env_complete``): such a dir is reused as is, and a dir a killed build
or copy left half-made never passes for one. A spec whose interpreter is not the sandbox's
is refused before anything is built (``interpreter_problem``): a task never runs its tests
in an interpreter it did not ask for.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

# sandbox_python is asked through this module by mint and clean (one import for both)
from codeloop.agent.envdirs import SPEC_FILE, finish_tree, sandbox_python  # noqa: F401
from codeloop.data.repos.envspec import EnvSpec, normalize_name


class EnvBuildError(RuntimeError):
    """An env dir cannot be built from its spec (the failing command's stderr tail inside)."""


def interpreter_problem(spec: EnvSpec, have: str) -> str:
    """Why ``spec`` cannot run on an interpreter ``have`` ('' when it can)."""
    return "" if spec.python == have else f"needs python {spec.python}; sandbox has {have}"


def read_spec(env_dir: str | Path) -> EnvSpec | None:
    """The spec an env dir records, or None (no spec.json, or not a spec)."""
    try:
        return EnvSpec.from_dict(json.loads(Path(env_dir, SPEC_FILE).read_text()))
    except (OSError, ValueError):
        return None


def env_complete(env_dir: str | Path) -> bool:
    """True when the dir's spec.json hashes to the dir's name (written last: complete)."""
    spec = read_spec(env_dir)
    return spec is not None and spec.spec_hash() == Path(env_dir).name


def _argv(command: str, wheels: Path, target: Path, reqs: tuple[str, ...]) -> list[str]:
    """One install command as argv: ``pip`` is the running interpreter's pip, and the
    ``{requirements}`` word expands to the pins."""
    out: list[str] = []
    for i, word in enumerate(shlex.split(command)):
        if i == 0 and word == "pip":
            out += [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input"]
        elif word == "{requirements}":
            out += list(reqs)
        else:
            out.append(word.format(wheels=wheels, target=target))
    return out


def build_spec_env(spec: EnvSpec, envs_root: str | Path, wheels: str | Path) -> Path:
    """``envs_root/<spec hash>/``, built from ``wheels`` unless complete already.
    EnvBuildError with the failing command's stderr tail when it cannot be built."""
    envs_root = Path(envs_root)
    dest = envs_root / spec.spec_hash()
    if env_complete(dest):
        return dest
    envs_root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name[:16]}-", dir=envs_root))
    try:
        if spec.requirements:
            for command in spec.install:
                argv = _argv(command, Path(wheels).resolve(), tmp, spec.requirements)
                proc = subprocess.run(argv, capture_output=True, text=True)
                if proc.returncode != 0:
                    raise EnvBuildError(
                        f"{command.split()[0]} install of {' '.join(spec.requirements)} "
                        f"failed: {proc.stderr.strip()[-800:]}"
                    )
        finish_tree(str(tmp))
        (tmp / SPEC_FILE).write_text(json.dumps(spec.to_dict(), indent=1, sort_keys=True) + "\n")
        os.chmod(tmp / SPEC_FILE, 0o644)
        if dest.exists():  # a half-made dir (no valid spec.json): replaced
            shutil.rmtree(dest)
        os.rename(tmp, dest)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
        if not env_complete(dest):  # built concurrently by another process: theirs stands
            raise
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    os.chmod(envs_root, 0o755)
    return dest


def copy_env(src: str | Path, envs_root: str | Path) -> Path | None:
    """Copy a complete env dir into ``envs_root`` under its name (whole or absent: a copy
    goes to a temp dir first); None when ``src`` is not complete."""
    src = Path(src)
    if not env_complete(src):
        return None
    dest = Path(envs_root) / src.name
    if env_complete(dest):
        return dest
    Path(envs_root).mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{src.name[:16]}-", dir=envs_root))
    shutil.copytree(src, tmp, dirs_exist_ok=True, symlinks=True)  # a link is never followed
    if dest.exists():
        shutil.rmtree(dest)
    try:
        os.rename(tmp, dest)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
        if not env_complete(dest):
            raise
    return dest


def _dist_of(filename: str) -> tuple[str, str] | None:
    """(normalised name, version) of a wheel or sdist file name."""
    if filename.endswith(".whl"):
        parts = filename[:-4].split("-")
        return (normalize_name(parts[0]), parts[1]) if len(parts) >= 5 else None
    for ext in (".tar.gz", ".zip"):
        if filename.endswith(ext):
            name, _, version = filename[: -len(ext)].rpartition("-")
            return (normalize_name(name), version) if name else None
    return None


def copy_pinned_wheels(spec: EnvSpec, cache: str | Path, dest: str | Path) -> list[str]:
    """Copy the cache's files of exactly the spec's pins into ``dest`` (so a dir of tasks
    carries what rebuilds its environment offline); the names copied."""
    pins = {tuple(r.split("==", 1)) for r in spec.requirements}
    got = []
    for f in sorted(Path(cache).iterdir()) if Path(cache).is_dir() else []:
        if _dist_of(f.name) in pins:
            Path(dest).mkdir(parents=True, exist_ok=True)
            shutil.copyfile(f, Path(dest) / f.name)
            got.append(f.name)
    return got
