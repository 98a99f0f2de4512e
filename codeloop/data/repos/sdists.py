"""A listed repository's sdist, fetched once into a cache dir and checked against its pin.

``fetch_sdist(entry, cache)`` answers ``cache/<file name>`` when that file's sha256 is the
entry's pin; otherwise it downloads the sdist (the entry's url, or PyPI's sdist of
name==version found through its simple index's JSON form, PEP 691) to a temporary file, checks its sha256, and
only then renames it into place, so the cache never holds a file that does not match
its pin. A mismatch is refused naming the repository, the pinned and the actual hash.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

PYPI_SIMPLE = "https://pypi.org/simple/{name}/"
SIMPLE_JSON = "application/vnd.pypi.simple.v1+json"
TIMEOUT_S = 60.0


class PinMismatch(ValueError):
    """A fetched (or cached) sdist whose sha256 is not its pin."""


class FetchError(OSError):
    """An sdist that cannot be fetched (the URL and the reason inside)."""


def sha256_of(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _open(url: str, accept: str = ""):
    req = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
    try:
        return urllib.request.urlopen(req, timeout=TIMEOUT_S)  # noqa: S310 - https/file only
    except (urllib.error.URLError, OSError) as exc:
        raise FetchError(f"cannot fetch {url}: {exc}") from None


def _sdist_of(filename: str) -> tuple[str, str] | None:
    """(normalised name, version) of an sdist file name, None for anything else."""
    for ext in (".tar.gz", ".zip"):
        if filename.endswith(ext):
            name, _, version = filename[: -len(ext)].rpartition("-")
            return (_norm(name), version) if name else None
    return None


def pypi_sdist_url(name: str, version: str) -> str:
    """The URL of PyPI's sdist of ``name==version`` (FetchError when it has none)."""
    url = PYPI_SIMPLE.format(name=_norm(name))
    with _open(url, SIMPLE_JSON) as resp:
        try:
            files = json.load(resp).get("files", [])
        except ValueError as exc:
            raise FetchError(f"{url}: not JSON: {exc}") from None
    for f in files:
        if _sdist_of(f.get("filename", "")) == (_norm(name), version):
            return f["url"]
    raise FetchError(f"PyPI has no sdist of {name}=={version}")


def sdist_url(entry) -> str:
    """Where the entry's sdist comes from: its url, else PyPI's sdist of name==version."""
    return entry.url or pypi_sdist_url(entry.name, entry.version)


def cached_name(entry) -> str:
    """The file name the sdist is cached under: the URL's last part, or name-version."""
    if entry.url:
        return entry.url.rsplit("/", 1)[-1]
    return f"{entry.name}-{entry.version}.tar.gz"


def _mismatch(entry, got: str, where: str) -> PinMismatch:
    return PinMismatch(
        f"repository {entry.name} {entry.version}: sha256 of {where} is {got}, "
        f"but the list pins {entry.sha256}"
    )


def fetch_sdist(entry, cache: str | Path) -> Path:
    """The entry's sdist in ``cache``, fetched when absent; PinMismatch when the cached or
    the fetched file does not hash to ``entry.sha256``, FetchError when it cannot be had."""
    cache = Path(cache)
    dest = cache / cached_name(entry)
    if dest.is_file():
        got = sha256_of(dest)
        if got != entry.sha256:
            raise _mismatch(entry, got, f"the cached {dest}")
        return dest
    url = sdist_url(entry)
    cache.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}-", dir=cache)
    try:
        with os.fdopen(fd, "wb") as out, _open(url) as resp:
            while chunk := resp.read(1 << 20):
                out.write(chunk)
        got = sha256_of(tmp)
        if got != entry.sha256:
            raise _mismatch(entry, got, url)
        os.chmod(tmp, 0o644)
        os.replace(tmp, dest)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return dest
