"""Host-side file operations inside a workspace that never follow a link nor leave the tree.

The agent can make symbolic links (bash, or a test it runs), and a link in its workspace
may point at any host path; these run on the host, as our own user. So a path is taken
apart component by component and each one is opened relative to its parent's fd with
``O_NOFOLLOW`` (``openat``): a link anywhere on the way is an error, ``..`` and absolute
paths are refused before anything is opened, and what is finally read or written is the
file the fd names, not whatever a name points to by then.
"""

from __future__ import annotations

import errno
import os
import posixpath
import stat

from codeloop.sandbox.trees import remove_tree_at

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
NOISE = frozenset({"__pycache__", ".pytest_cache"})


class ToolError(Exception):
    """A call the agent got wrong: ``kind`` is the observation's error_kind."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def split_path(path: object) -> list[str]:
    """Components of a workspace-relative path ([] for the root); ToolError if it is not
    a string, is absolute or climbs out with ``..``."""
    if not isinstance(path, str) or "\0" in path:
        raise ToolError("bad_args", "path must be a string")
    if path.startswith("/"):
        raise ToolError("outside_workspace", f"{path}: absolute paths are outside the workspace")
    norm = posixpath.normpath(path or ".")
    if norm == ".." or norm.startswith("../"):
        raise ToolError("outside_workspace", f"{path}: leaves the workspace")
    return [] if norm == "." else norm.split("/")


def _kind(dir_fd: int, name: str) -> int | None:
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode
    except FileNotFoundError:
        return None


def open_dir(root: str, parts: list[str], create: bool = False) -> int:
    """An fd of the dir ``parts`` under ``root`` (made with ``create``); caller closes it."""
    fd = os.open(root, DIR_FLAGS)
    try:
        for i, name in enumerate(parts):
            mode = _kind(fd, name)
            shown = "/".join(parts[: i + 1])
            if mode is None and create:
                os.mkdir(name, 0o755, dir_fd=fd)
                mode = _kind(fd, name)
            if mode is None:
                raise ToolError("not_found", f"{shown}: no such directory")
            if stat.S_ISLNK(mode):
                raise ToolError("symlink", f"{shown}: is a symbolic link; links are not followed")
            if not stat.S_ISDIR(mode):
                raise ToolError("not_a_directory", f"{shown}: not a directory")
            nfd = os.open(name, DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = nfd
        return fd
    except BaseException:
        os.close(fd)
        raise


def read_bytes(root: str, path: str, limit: int) -> bytes:
    """The bytes of a regular file in the workspace (ToolError past ``limit`` bytes)."""
    parts = split_path(path)
    if not parts:
        raise ToolError("is_a_directory", f"{path}: is a directory")
    dfd = open_dir(root, parts[:-1])
    try:
        mode = _kind(dfd, parts[-1])
        if mode is None:
            raise ToolError("not_found", f"{path}: no such file")
        if stat.S_ISLNK(mode):
            raise ToolError("symlink", f"{path}: is a symbolic link; links are not followed")
        if stat.S_ISDIR(mode):
            raise ToolError("is_a_directory", f"{path}: is a directory (use list_files)")
        fd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK,
                     dir_fd=dfd)
    finally:
        os.close(dfd)
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise ToolError("bad_args", f"{path}: not a regular file")
        if st.st_size > limit:
            raise ToolError("too_large", f"{path}: {st.st_size} bytes, over the {limit} limit")
        return fh.read(limit + 1)


def write_bytes(root: str, path: str, data: bytes) -> None:
    """Write a file in the workspace (parents made), replacing a regular file's content."""
    parts = split_path(path)
    if not parts:
        raise ToolError("is_a_directory", f"{path}: is a directory")
    dfd = open_dir(root, parts[:-1], create=True)
    try:
        mode = _kind(dfd, parts[-1])
        if mode is not None and stat.S_ISLNK(mode):
            raise ToolError("symlink", f"{path}: is a symbolic link; links are not followed")
        if mode is not None and not stat.S_ISREG(mode):
            raise ToolError("bad_args", f"{path}: not a regular file")
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            fd = os.open(parts[-1], flags, 0o644, dir_fd=dfd)
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise ToolError("symlink", f"{path}: is a symbolic link") from None
            raise
    finally:
        os.close(dfd)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)


def list_tree(root: str, path: str, depth: int) -> list[str]:
    """Entries under ``path`` up to ``depth`` levels: dirs end in '/', links in '@'
    (listed, never entered)."""
    parts = split_path(path)
    prefix = "/".join(parts)
    out: list[str] = []
    fd = open_dir(root, parts)
    try:
        _walk(fd, prefix, depth, out)
    finally:
        os.close(fd)
    return out


def _walk(fd: int, prefix: str, depth: int, out: list[str]) -> None:
    with os.scandir(fd) as it:
        entries = sorted(it, key=lambda e: e.name)
    for e in entries:
        rel = f"{prefix}/{e.name}" if prefix else e.name
        if e.is_symlink():
            out.append(rel + "@")
        elif e.is_dir(follow_symlinks=False):
            if e.name in NOISE:
                continue
            out.append(rel + "/")
            if depth > 1:
                sub = os.open(e.name, DIR_FLAGS, dir_fd=fd)
                try:
                    _walk(sub, rel, depth - 1, out)
                finally:
                    os.close(sub)
        else:
            out.append(rel)


def remove_path(root: str, path: str) -> None:
    """Remove a file, link or whole dir of the tree (a link itself, never what it names);
    nothing there is no error."""
    parts = split_path(path)
    if not parts:
        raise ToolError("bad_args", "the tree's root cannot be removed")
    try:
        dfd = open_dir(root, parts[:-1])
    except ToolError:
        return  # a parent that is a link or missing: nothing of the tree lies there
    try:
        remove_tree_at(dfd, parts[-1])  # any depth, any path length (the agent's tree)
    finally:
        os.close(dfd)
