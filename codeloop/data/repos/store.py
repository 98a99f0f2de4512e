"""Content-addressed repository snapshots: ``<repos_dir>/<sha>/`` holds one pristine tree.

The hash covers the sorted relative paths, each file's bytes and its exec bit, so two
tasks from the same repository share one stored copy (SWE-smith's layout) and a tree
that changed by one byte, or one chmod, is a new snapshot. Caches and VCS metadata
(``.git``, ``__pycache__``, ``*.pyc``, ``.pytest_cache``) are not part of a tree: they
are not source, and ``.git`` would carry future history (the fix itself) into a workspace.
Writes go to a temporary sibling and are renamed into place, so a reader never sees a
half-written snapshot and two writers of the same tree both end with one good copy.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path

SKIP_DIRS = {".git", "__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache", ".tox"}
SKIP_SUFFIXES = (".pyc", ".pyo")


class SnapshotError(RuntimeError):
    """A snapshot that is missing, corrupt, or a source tree that cannot be stored."""


def iter_tree(src_dir: str | Path) -> list[tuple[str, Path, bool]]:
    """``(relative posix path, absolute path, executable)`` of every file, sorted by path.

    Symlinks are refused: a link can point outside the tree (at host files), and a
    snapshot is copied into sealed workspaces."""
    root = Path(src_dir)
    if not root.is_dir():
        raise SnapshotError(f"snapshot source is not a directory: {root}")
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
        for d in dirnames:
            if (Path(dirpath) / d).is_symlink():
                raise SnapshotError(f"{Path(dirpath) / d}: symlinks are not stored in snapshots")
        for name in filenames:
            if name.endswith(SKIP_SUFFIXES):
                continue
            p = Path(dirpath) / name
            st = p.lstat()
            if stat.S_ISLNK(st.st_mode):
                raise SnapshotError(f"{p}: symlinks are not stored in snapshots")
            if not stat.S_ISREG(st.st_mode):
                raise SnapshotError(f"{p}: not a regular file")
            out.append((p.relative_to(root).as_posix(), p, bool(st.st_mode & 0o100)))
    return sorted(out)


def _hash_entries(entries: Iterable[tuple[str, bytes, bool]]) -> str:
    h = hashlib.sha256(b"codeloop-snapshot-v1\0")
    for rel, data, exe in entries:
        # length-prefixed fields: no path/content boundary can be forged by either
        h.update(f"{len(rel)}:{rel}\0{int(exe)}\0{len(data)}\0".encode())
        h.update(data)
    return h.hexdigest()


def tree_hash(src_dir: str | Path) -> str:
    """The content hash of a directory tree (see the module docstring)."""
    return _hash_entries((rel, p.read_bytes(), exe) for rel, p, exe in iter_tree(src_dir))


def files_hash(files: Mapping[str, str | bytes], executable: Iterable[str] = ()) -> str:
    """The hash ``tree_hash`` would give the tree ``files`` (relative path -> content)."""
    exe = set(executable)
    return _hash_entries((rel, _as_bytes(files[rel]), rel in exe) for rel in sorted(files))


def _as_bytes(content: str | bytes) -> bytes:
    return content.encode() if isinstance(content, str) else content


def snapshot_path(repos_dir: str | Path, sha: str) -> Path:
    """Where snapshot ``sha`` lies; SnapshotError when it is not stored."""
    if not sha or not all(c in "0123456789abcdef" for c in sha):
        raise SnapshotError(f"not a snapshot id: {sha!r}")
    p = Path(repos_dir) / sha
    if not p.is_dir():
        raise SnapshotError(f"snapshot {sha} is not stored under {repos_dir}")
    return p


def verify_snapshot(repos_dir: str | Path, sha: str) -> None:
    """Raise SnapshotError unless the stored tree still hashes to its name."""
    got = tree_hash(snapshot_path(repos_dir, sha))
    if got != sha:
        raise SnapshotError(
            f"snapshot {sha} under {repos_dir} is corrupt: its tree hashes to {got}"
        )


def _install(tmp: Path, final: Path) -> None:
    try:
        os.rename(tmp, final)
    except OSError:
        if not final.is_dir():  # not a lost race: a real failure
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        shutil.rmtree(tmp, ignore_errors=True)  # another writer stored the same tree first


def store_snapshot(src_dir: str | Path, repos_dir: str | Path) -> str:
    """Store the tree of ``src_dir`` under ``repos_dir`` once; return its hash.

    Idempotent: a tree already stored (and intact) is not copied again."""
    entries = iter_tree(src_dir)
    sha = _hash_entries((rel, p.read_bytes(), exe) for rel, p, exe in entries)
    final = Path(repos_dir) / sha
    if final.is_dir():
        return sha
    Path(repos_dir).mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{sha[:12]}-", dir=repos_dir))
    for rel, p, exe in entries:
        dst = tmp / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(p, dst)
        os.chmod(dst, 0o755 if exe else 0o644)
    os.chmod(tmp, 0o755)
    _install(tmp, final)
    return sha


def store_files(
    files: Mapping[str, str | bytes], repos_dir: str | Path, executable: Iterable[str] = ()
) -> str:
    """Store an in-memory tree (relative path -> content) like store_snapshot; return its hash."""
    exe = set(executable)
    sha = files_hash(files, exe)
    final = Path(repos_dir) / sha
    if final.is_dir():
        return sha
    Path(repos_dir).mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{sha[:12]}-", dir=repos_dir))
    for rel in sorted(files):
        if rel.startswith("/") or ".." in rel.split("/"):
            shutil.rmtree(tmp, ignore_errors=True)
            raise SnapshotError(f"file path {rel!r} leaves the tree")
        dst = tmp / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        dst.write_bytes(_as_bytes(files[rel]))
        os.chmod(dst, 0o755 if rel in exe else 0o644)
    os.chmod(tmp, 0o755)
    _install(tmp, final)
    return sha


def prune_snapshots(repos_dir: str | Path, keep: Iterable[str]) -> list[str]:
    """Remove stored snapshots (and stale temporaries) not in ``keep``; return what went."""
    root = Path(repos_dir)
    if not root.is_dir():
        return []
    wanted = set(keep)
    gone = []
    for p in sorted(root.iterdir()):
        if p.is_dir() and p.name not in wanted:
            shutil.rmtree(p)
            gone.append(p.name)
    return gone
