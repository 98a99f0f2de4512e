"""What an env dir must be before the sandbox mounts it or bakes it into an image.

A task names its environment (``Task.environment``) and the task comes from data: the
name is only ever one plain directory name (never ``.``, ``..``, a path, or text that a
Dockerfile line or a docker tag would read as more than a name); the dir holds regular
files and dirs only (a symlink would make a copy of it pull in whatever host file it
points at); and its content is what the task was verified in. ``tree_digest`` is that
content's sha256 (every path and every byte, compiled files included); mint records it
in the task's ``metadata["env_digest"]``, clean checks a minted dir against it and records
the digest of the dir its tasks were verified in, and every later copy or image of the
dir is checked against it (``check_digest``), so a dir changed after verification is an
error, never a quiet change of what the tests run in.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat

DIGEST_KEY = "env_digest"  # Task.metadata key of the digest the task was verified with
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


class EnvTrustError(ValueError):
    """An env dir, or a task's name for one, that must not be used; the message names it."""


def name_problem(name: str) -> str:
    """Why ``name`` cannot name an env dir ('' when it can): one plain dir name of letters,
    digits, ``.``, ``_`` and ``-``, starting with a letter or digit, at most 128 long."""
    if _NAME.fullmatch(name):
        return ""
    return (f"environment {name[:80]!r} is not one plain dir name (letters, digits, '.', "
            "'_', '-'; starting with a letter or digit)")


def check_name(name: str, who: str = "") -> str:
    """``name`` when it may name an env dir; EnvTrustError (prefixed ``who``) otherwise."""
    problem = name_problem(name)
    if problem:
        raise EnvTrustError(f"{who}: {problem}" if who else problem)
    return name


def tree_digest(env_dir: str | os.PathLike) -> str:
    """sha256 (hex) over every dir path and every file's path and bytes below ``env_dir``,
    in sorted order; EnvTrustError naming the first entry that is not a regular file or a
    dir (a symlink, a fifo, a device), the top dir included."""
    top = os.fspath(env_dir)
    if not stat.S_ISDIR(os.lstat(top).st_mode):
        raise EnvTrustError(f"env dir {top} is not a plain directory (a link or a file)")
    h = hashlib.sha256()
    for here, dirs, files in os.walk(top):
        dirs.sort()
        rel_here = os.path.relpath(here, top)
        for name in sorted(dirs + files):
            path = os.path.join(here, name)
            rel = os.path.normpath(os.path.join(rel_here, name))
            mode = os.lstat(path).st_mode
            if stat.S_ISDIR(mode):
                h.update(b"d\0" + rel.encode() + b"\0")
            elif stat.S_ISREG(mode):
                h.update(b"f\0" + rel.encode() + b"\0")
                with open(path, "rb") as f:
                    h.update(hashlib.sha256(f.read()).digest())
            else:
                raise EnvTrustError(f"env dir {top}: {rel} is a link or special file, "
                                    "not a regular file")
    return h.hexdigest()


def check_digest(env_dir: str | os.PathLike, expected: str, who: str = "") -> str:
    """The dir's digest; EnvTrustError naming the dir (prefixed ``who``) when ``expected``
    is given and differs: the dir changed after its tasks were verified in it."""
    got = tree_digest(env_dir)
    if expected and got != expected:
        head = f"{who}: " if who else ""
        raise EnvTrustError(f"{head}env dir {os.fspath(env_dir)} changed after its tasks were "
                            f"verified in it (content digest {got[:16]}, recorded "
                            f"{expected[:16]})")
    return got
