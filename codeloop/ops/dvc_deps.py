"""dvc.yaml's code deps, computed: each stage's import closure over the repository's files.

A stage command ``python -m <module>`` runs that module and everything it imports. The
closure follows every ``import`` / ``from ... import`` in the source (module level and
function-local alike, read with ``ast``, never executed), keeps the ones that resolve to a
file of this repository (``codeloop/``, ``flows/``, ``tasks/``; the packages'
``__init__.py`` included, since Python runs them) and recurses into those. A module that
ships a sibling source file by name (``HERE / "harness.py"``: the sandbox sends the
zygote's and harness's source to its children) depends on that file too. Third-party
modules end the walk. Data deps (data/..., models/..., history/..., metrics/...) are
dvc.yaml's own and left as written.

``codeloop dvc-deps`` checks dvc.yaml against the closures; ``--write`` rewrites its code
deps (run it after any change to a stage's imports; CI's test fails while they differ).
"""

from __future__ import annotations

import ast
import re
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

CODE_ROOTS = ("codeloop", "flows", "tasks")
_CMD = re.compile(r"(?:^|\s)-m\s+([\w.]+)")  # python -m M, torchrun ... -m M


def module_file(root: Path, module: str) -> Path | None:
    """The repo file that ``import module`` loads, or None (third-party / absent)."""
    parts = module.split(".")
    if parts[0] not in CODE_ROOTS:
        return None
    base = root.joinpath(*parts)
    for cand in (base.with_suffix(".py"), base / "__init__.py"):
        if cand.is_file():
            return cand
    return None


def _packages(root: Path, module: str) -> list[Path]:
    """The __init__.py files Python runs on the way to ``module``."""
    parts = module.split(".")
    out = []
    for i in range(1, len(parts)):
        init = root.joinpath(*parts[:i], "__init__.py")
        if init.is_file():
            out.append(init)
    return out


def module_name(root: Path, path: Path) -> str:
    rel = path.relative_to(root).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _stamp(path: Path) -> tuple[int, int]:
    """What says a file changed: its modification time and size."""
    st = path.stat()
    return st.st_mtime_ns, st.st_size


@lru_cache(maxsize=4096)
def _parsed(path: Path, stamp: tuple[int, int]) -> ast.Module:
    """``path``'s syntax tree, parsed once per version of the file (every stage's closure
    walks the same files)."""
    return ast.parse(path.read_text(), filename=str(path))


def imported_modules(path: Path, module: str) -> set[str]:
    """Every module name ``path`` (module ``module``) may import, anywhere in its body."""
    return set(_imported(path, module, _stamp(path)))


@lru_cache(maxsize=4096)
def _imported(path: Path, module: str, stamp: tuple[int, int]) -> frozenset[str]:
    tree = _parsed(path, stamp)
    is_pkg = path.name == "__init__.py"
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                pkg = module.split(".") if is_pkg else module.split(".")[:-1]
                pkg = pkg[: len(pkg) - (node.level - 1)]
                base = ".".join([*pkg, node.module] if node.module else pkg)
            else:
                base = node.module or ""
            names.add(base)
            # `from pkg import name` may name a submodule: keep both readings.
            names.update(f"{base}.{a.name}" for a in node.names if a.name != "*")
    return frozenset(n for n in names if n)


def sibling_sources(path: Path) -> set[Path]:
    """Files next to ``path`` that it names as ``"<name>.py"`` string literals (read as
    source, not imported)."""
    names = _py_literals(path, _stamp(path))
    return {path.parent / n for n in names if "/" not in n and (path.parent / n).is_file()}


@lru_cache(maxsize=4096)
def _py_literals(path: Path, stamp: tuple[int, int]) -> frozenset[str]:
    return frozenset(
        n.value
        for n in ast.walk(_parsed(path, stamp))
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value.endswith(".py")
    )


def closure(root: Path, module: str) -> set[str]:
    """Repo files (relative, posix) run by ``python -m module`` in ``root``."""
    root = Path(root)
    start = module_file(root, module)
    if start is None:
        raise FileNotFoundError(f"{root}: module {module!r} is not a file of this repository")
    seen: dict[Path, str] = {}
    todo = [(start, module), *[(p, module_name(root, p)) for p in _packages(root, module)]]
    while todo:
        path, name = todo.pop()
        if path in seen:
            continue
        seen[path] = name
        for imp in imported_modules(path, name):
            f = module_file(root, imp)
            if f is not None and f not in seen:
                todo.append((f, imp))
            todo += [(p, module_name(root, p)) for p in _packages(root, imp) if p not in seen]
        todo += [(f, module_name(root, f)) for f in sibling_sources(path) if f not in seen]
    return {p.relative_to(root).as_posix() for p in seen}


def _dep_name(entry: str | dict[str, Any]) -> str:  # a path, or {path: options}
    return entry if isinstance(entry, str) else next(iter(entry))


def _is_code(dep: str) -> bool:
    return dep.split("/", 1)[0] in CODE_ROOTS


def stage_module(stage: str, cmd: str) -> str:
    """The module a stage command runs (``python -m flows.score`` -> ``flows.score``)."""
    m = _CMD.search(cmd.strip())
    if not m:
        raise ValueError(f"dvc.yaml: stage {stage}: cmd {cmd!r} runs no `-m <module>`")
    return m.group(1)


def expected_deps(root: Path, stages: dict[str, Any]) -> dict[str, list[str]]:
    """Per stage: its code closure, sorted, then its data deps as dvc.yaml lists them."""
    out = {}
    for name, st in stages.items():
        code = sorted(closure(root, stage_module(name, st["cmd"])))
        data = [d for d in st.get("deps", []) if not _is_code(_dep_name(d))]
        out[name] = code + data
    return out


def check(root: Path, dvc_yaml: Path | None = None) -> list[str]:
    """Problems of dvc.yaml's code deps: files a stage imports but does not list, and
    listed code paths it does not import. Empty when dvc.yaml is current."""
    root = Path(root)
    dvc_yaml = dvc_yaml or root / "dvc.yaml"
    stages = (yaml.safe_load(dvc_yaml.read_text()) or {}).get("stages", {})
    problems = []
    for name, deps in expected_deps(root, stages).items():
        listed = {_dep_name(d).rstrip("/") for d in stages[name].get("deps", [])}
        want = {d for d in deps if isinstance(d, str) and _is_code(d)}
        problems += [f"{name}: imports {f}, missing from deps" for f in sorted(want - listed)]
        extra = {d for d in listed if _is_code(d)} - want
        problems += [f"{name}: lists {f}, which it does not import" for f in sorted(extra)]
    return problems


def write(root: Path, dvc_yaml: Path | None = None) -> bool:
    """Rewrite dvc.yaml's code deps from the closures; True when the file changed.

    Only the ``deps:`` blocks of the stages are replaced (comments and the rest of the
    file stay as written)."""
    root = Path(root)
    dvc_yaml = dvc_yaml or root / "dvc.yaml"
    text = dvc_yaml.read_text()
    stages = (yaml.safe_load(text) or {}).get("stages", {})
    new = text
    for name, deps in expected_deps(root, stages).items():
        new = _replace_deps(new, name, deps)
    if yaml.safe_load(new) != _with_deps(yaml.safe_load(text), expected_deps(root, stages)):
        raise RuntimeError(f"{dvc_yaml}: rewriting the deps blocks changed more than deps")
    if new == text:
        return False
    dvc_yaml.write_text(new)
    return True


def _with_deps(doc: dict, deps: dict[str, list[str]]) -> dict:
    for name, d in deps.items():
        doc["stages"][name]["deps"] = d
    return doc


def _replace_deps(text: str, stage: str, deps: list[str | dict[str, Any]]) -> str:
    """Replace the ``deps:`` list of ``stage`` (two-space indented dvc.yaml layout)."""
    pattern = re.compile(
        rf"(^  {re.escape(stage)}:\n(?:    .*\n)*?    deps:\n)((?:      - .*\n)+)", re.M
    )
    m = pattern.search(text)
    if not m:
        raise ValueError(f"dvc.yaml: stage {stage}: no `deps:` list in the expected layout")
    lines = "".join(f"      - {d}\n" for d in deps)
    return text[: m.start(2)] + lines + text[m.end(2) :]
