"""A repository task's environment, as data: the interpreter it needs, its pinned
requirements, how it is installed and how its tests run.

The spec is content-addressed: ``spec_hash()`` is the sha256 of its canonical JSON (keys
sorted, no whitespace, requirements sorted and name-normalised), and the env dir built from
it is ``envs_root/<hash>/`` (codeloop.data.repos.envbuild), so two tasks with the same
needs share one dir and a changed pin makes another. ``Task.environment`` holds the hash
and ``Task.metadata["env_spec"]`` the spec itself, so a task row alone says how to rebuild
its environment. Pure: nothing here touches the disk or runs a process.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import asdict, dataclass

# what builds an env dir from the spec: pip puts exactly the pinned wheels, no others
# (--no-deps) and none from a registry (--no-index), into the dir; {wheels}, {target} and
# {requirements} are filled in by the builder
PIP_INSTALL = (
    "pip install --no-index --no-deps --no-compile --find-links {wheels} "
    "--target {target} {requirements}"
)
PYTEST = "python -m pytest -q -p no:cacheprovider"
_TREE_PATH = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*(/[A-Za-z0-9_][A-Za-z0-9_.-]*)*$")
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([A-Za-z0-9.+!_-]+)$")


def normalize_name(name: str) -> str:
    """A distribution name as pip compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _pins(reqs) -> tuple[str, ...]:
    out = set()
    for r in reqs:
        m = _PIN.match(r.strip())
        if not m:
            raise ValueError(f"env spec: requirement {r!r} is not pinned as name==version")
        out.add(f"{normalize_name(m.group(1))}=={m.group(2)}")
    return tuple(sorted(out))


def _tree_paths(paths) -> tuple[str, ...]:
    out = []
    for p in paths:
        if not isinstance(p, str) or not _TREE_PATH.match(p) or ".." in p.split("/"):
            raise ValueError(f"env spec: tree path {p!r} is not a relative dir of the tree")
        if p not in out:
            out.append(p)
    return tuple(out)


@dataclass(frozen=True)
class EnvSpec:
    """What a repository's tests need to run. ``python``: the interpreter's major.minor
    ("3.11"); ``requirements``: every distribution installed, ``name==version``, sorted
    (the transitive resolution, not the declared ranges); ``install``: the commands that
    build the env dir from a wheel cache; ``test_command``: how the repository's tests
    are run in it (the sandbox runs pytest through its sealed entry with that interpreter);
    ``tree_paths``: dirs of the repository tree that go on sys.path right after its root,
    as an editable install would put them (a src layout's ``src``); the sandbox's pytest
    entries read them from the env dir's spec.json."""

    python: str
    requirements: tuple[str, ...] = ()
    install: tuple[str, ...] = (PIP_INSTALL,)
    test_command: str = PYTEST
    tree_paths: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not re.fullmatch(r"\d+\.\d+", self.python):
            raise ValueError(f"env spec: python {self.python!r} is not a major.minor version")
        object.__setattr__(self, "requirements", _pins(self.requirements))
        object.__setattr__(self, "install", tuple(self.install))
        object.__setattr__(self, "tree_paths", _tree_paths(self.tree_paths))

    def to_dict(self) -> dict:
        """Every field, as JSON types (what spec.json and the task's metadata hold); no
        ``tree_paths`` key when there are none, so a flat repository's spec (and its hash)
        reads as it did before the field existed."""
        d = asdict(self)
        d["requirements"], d["install"] = list(self.requirements), list(self.install)
        d["tree_paths"] = list(self.tree_paths)
        if not self.tree_paths:
            del d["tree_paths"]
        return d

    def canonical_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    def spec_hash(self) -> str:
        """sha256 (hex) of the canonical JSON: the env dir's name."""
        return hashlib.sha256(self.canonical_json().encode()).hexdigest()

    @classmethod
    def from_dict(cls, d: dict) -> EnvSpec:
        """The spec a ``to_dict`` gave (ValueError naming a missing or bad field)."""
        if not isinstance(d, dict) or "python" not in d:
            raise ValueError(f"env spec: not a spec (no python field): {d!r}"[:300])
        return cls(
            python=str(d["python"]),
            requirements=tuple(d.get("requirements", ())),
            install=tuple(d.get("install", (PIP_INSTALL,))),
            test_command=str(d.get("test_command", PYTEST)),
            tree_paths=tuple(d.get("tree_paths", ())),
        )


def python_needed(
    requires_python: str, have: str, candidates=tuple(f"3.{m}" for m in range(6, 15))
) -> str:
    """The interpreter version a package's ``requires-python`` asks for: ``have`` (the
    sandbox's) when it admits it, else the newest candidate it admits (else the oldest
    candidate: nothing known fits). Where packaging cannot parse it, ``have``."""
    if not requires_python.strip():
        return have
    try:
        from packaging.specifiers import InvalidSpecifier, SpecifierSet
    except ImportError:  # pragma: no cover - pytest, pip and our deps all bring packaging
        return have
    try:
        spec = SpecifierSet(requires_python)
    except InvalidSpecifier:
        return have
    if spec.contains(f"{have}.0", prereleases=True):
        return have
    fits = [c for c in candidates if spec.contains(f"{c}.0", prereleases=True)]
    return fits[-1] if fits else candidates[0]
