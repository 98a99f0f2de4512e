"""params.yaml's ``mint`` section (what `codeloop mint` mints with) and the schema of the
repository list it names (``mint.repos_list``, repos.yaml at the repository root): real
packages' sdists, each pinned by its sha256, each a training or a held-out repository.

Config imports nothing of the domain; codeloop.config re-exports every name.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator

from codeloop.config.section import Section

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


class MintSection(Section):
    repos_list: str = Field(
        "repos.yaml",
        description="The repository list `codeloop mint --repos-list` reads when given no "
        "file: pinned sdists of real packages, each a training or a held-out repository.",
    )
    sdist_cache: str = Field(
        ".cache/mint/sdists",
        description="Where each listed sdist is fetched once (checked against its sha256 "
        "pin on every use; offline once it holds them).",
    )
    wheel_cache: str = Field(
        ".cache/mint/wheels",
        description="pip's --find-links cache of the repositories' dependencies (offline "
        "once it holds them).",
    )
    max_tasks: int = Field(
        20, ge=1, description="Tasks kept at most per repository (a list entry may set fewer)."
    )
    seed: int = Field(0, description="Seed of each repository's candidate order.")
    workers: int = Field(2, ge=1, le=64, description="Sandbox workers running the candidates.")
    hidden_fraction: float = Field(
        0.0, ge=0, lt=1, description="Share of FAIL_TO_PASS test functions kept hidden."
    )


class RepoEntry(Section):
    """One repository of the list."""

    name: str = Field(description="The distribution's name as on PyPI (unique in the list).")
    version: str = Field(description="The release minted (the sdist's version).")
    url: str = Field(
        "",
        description="Where the sdist is fetched from (https:// or file://); empty: PyPI's "
        "sdist of name==version, found through its simple index.",
    )
    sha256: str = Field(description="sha256 of the sdist (64 hex digits): a mismatch is refused.")
    license: str = Field(description="The package's licence (SPDX id), recorded in each task.")
    split: Literal["train", "heldout"] = Field(
        description="train: its tasks are training tasks; heldout: its tasks form the frozen "
        "set heldout_mint only and never reach training."
    )
    max_tasks: int = Field(
        0, ge=0, description="Tasks kept at most from it; 0: the mint section's max_tasks."
    )
    extra_requirements: list[str] = Field(
        default_factory=list,
        description="Test dependencies the sdist does not declare as a test extra (a tox.ini "
        "or a poetry dev group): installed into its environment with the declared ones.",
    )
    notes: str = Field("", description="Why it is on the list (layout, dependencies, plugins).")

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _NAME.match(v):
            raise ValueError(f"{v!r} is not a distribution name")
        return v

    @field_validator("sha256")
    @classmethod
    def _sha(cls, v: str) -> str:
        if not re.fullmatch(r"[0-9a-f]{64}", v):
            raise ValueError(f"{v!r} is not a sha256 (64 lowercase hex digits)")
        return v

    @field_validator("url")
    @classmethod
    def _url(cls, v: str) -> str:
        if v and not v.startswith(("https://", "file://")):
            raise ValueError(f"{v!r}: only https:// and file:// sdists are fetched")
        if v and not v.endswith((".tar.gz", ".zip")):
            raise ValueError(f"{v!r} does not name an sdist (.tar.gz or .zip)")
        return v


    @model_validator(mode="after")
    def _url_names_the_release(self) -> RepoEntry:
        if self.url:
            file = self.url.rsplit("/", 1)[-1]
            stem = file.removesuffix(".tar.gz").removesuffix(".zip")
            name, _, version = stem.rpartition("-")
            if (_norm(name), version) != (_norm(self.name), self.version):
                raise ValueError(f"url's file {file} is not the sdist of {self.name}=={self.version}")
        return self


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


class ReposList(Section):
    repos: list[RepoEntry] = Field(description="The repositories, minted in this order.")

    @model_validator(mode="after")
    def _unique(self) -> ReposList:
        seen: set[str] = set()
        for e in self.repos:
            key = _norm(e.name)
            if key in seen:
                raise ValueError(f"repository {e.name!r} is listed twice")
            seen.add(key)
        return self

    def of_split(self, split: str) -> list[RepoEntry]:
        return [e for e in self.repos if e.split == split]


def parse_repos_list(data, source: str = "repos.yaml") -> ReposList:
    """Validate a repository list; ValueError naming the file, the entry (index and name)
    and the field of every problem."""
    from pydantic import ValidationError

    try:
        return ReposList.model_validate(data or {})
    except ValidationError as exc:
        repos = (data or {}).get("repos") if isinstance(data, dict) else None
        lines = []
        for err in exc.errors():
            loc = list(err["loc"])
            where = ".".join(str(p) for p in loc) or "(top level)"
            if len(loc) >= 2 and loc[0] == "repos" and isinstance(loc[1], int) and isinstance(
                repos, list) and loc[1] < len(repos) and isinstance(repos[loc[1]], dict):
                where += f" ({repos[loc[1]].get('name', '?')})"
            lines.append(f"{where}: {err['msg']}")
        raise ValueError(f"{source}: invalid repository list:\n  " + "\n  ".join(lines)) from None


def load_repos_list(path: str | Path) -> ReposList:
    """Read and validate a repository list file (ValueError naming it and the bad field)."""
    import yaml

    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path}: repository list not found")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ValueError(f"{path}: not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: top level must be a mapping with a 'repos' list")
    return parse_repos_list(data, str(path))
