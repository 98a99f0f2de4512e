"""Patch parsing and the judge's tree check: ours beside the old quadratic parser.

Run: ``.venv/bin/python bench/patch_parse.py [--lines 20000 40000 80000] [--files 2000]``

Prints, from one run on this machine:
1. ``hacks.parse_patch`` on a one-file patch of N added lines (the shape a model can send
   at the judge) against the parser it replaced, kept below as ``old_parse_patch``: that
   one grew each section's text with ``+=`` and searched it again for ``--- `` lines, so its
   time grows with the square of the section's length. Times are the best of a few runs,
   the ratio is old / ours;
2. ``hacks.tree_check`` on a tree of F files where one ``git apply`` changed one file:
   the stat fast path, ``exact=True`` (every same-size file read, as after a run), and a
   plain read of every file of both trees for scale.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from codeloop.agent.hacks import FileDiff, Hunk, parse_patch, tree_check  # noqa: E402
from codeloop.agent.patches import apply_patch, file_diff  # noqa: E402

_OLD_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@ ?(.*)$")


def _old_strip_prefix(p: str) -> str:
    p = p.split("\t")[0].strip()
    if p == "/dev/null":
        return ""
    return p[2:] if p[:2] in ("a/", "b/") else p


def _old_header(cur: FileDiff, body: str) -> None:
    if body.startswith("--- "):
        cur.old_path = _old_strip_prefix(body[4:])
    elif body.startswith("+++ "):
        cur.new_path = _old_strip_prefix(body[4:])
    elif body.startswith(("rename from ", "copy from ")):
        cur.old_path = body.split(" ", 2)[2]
    elif body.startswith(("rename to ", "copy to ")):
        cur.new_path = body.split(" ", 2)[2]
    elif body.startswith("deleted file mode"):
        cur.new_path = ""
    elif body.startswith("new file mode"):
        cur.old_path = ""


def old_parse_patch(patch: str) -> list[FileDiff]:
    """The parser as it was before (the baseline): text grown line by line with ``+=``."""
    files: list[FileDiff] = []
    cur: FileDiff | None = None
    left = [0, 0]
    for line in (patch or "").splitlines(keepends=True):
        body = line.rstrip("\r\n")
        if left[0] > 0 or left[1] > 0:
            tag = body[:1] if body[:1] in (" ", "-", "+") else " "
            cur.hunks[-1].lines.append((tag, body[1:]))
            left[0] -= tag != "+"
            left[1] -= tag != "-"
            cur.text += line
            continue
        starts = body.startswith("diff --git ") or (
            body.startswith("--- ") and (cur is None or cur.hunks or "--- " in cur.text)
        )
        if starts:
            if cur is not None:
                files.append(cur)
            parts = body.split()
            guess = (
                _old_strip_prefix(parts[3])
                if body.startswith("diff --git") and len(parts) > 3
                else ""
            )
            cur = FileDiff(guess, guess, "")
        if cur is None:
            continue
        cur.text += line
        if m := _OLD_HUNK.match(body):
            cur.hunks.append(Hunk(int(m[1]), int(m[3]), m[5]))
            left = [int(m[2] or 1), int(m[4] or 1)]
        elif not cur.hunks and not body.startswith("\\"):
            _old_header(cur, body)
    if cur is not None:
        files.append(cur)
    return files


def big_patch(n: int) -> str:
    """A new file of ``n`` lines, as one git diff section."""
    body = "".join(f"+x{i} = {i}  # a line of the new module\n" for i in range(n))
    return (
        "diff --git a/calc/big.py b/calc/big.py\nnew file mode 100644\n--- /dev/null\n"
        f"+++ b/calc/big.py\n@@ -0,0 +1,{n} @@\n{body}"
    )


def best(fn, repeat: int) -> float:
    """The best wall time of ``repeat`` calls, in seconds."""
    out = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        out = min(out, time.perf_counter() - t0)
    return out


def parse_rows(sizes: list[int]) -> None:
    print(f"{'lines':>8} {'ours s':>9} {'old s':>9} {'old/ours':>9}")
    for n in sizes:
        patch = big_patch(n)
        ours_fds, old_fds = parse_patch(patch), old_parse_patch(patch)
        assert ours_fds[0].text == old_fds[0].text and len(ours_fds[0].hunks[0].lines) == n
        ours = best(lambda p=patch: parse_patch(p), 3)
        old = best(lambda p=patch: old_parse_patch(p), 1 if n > 40_000 else 2)
        print(f"{n:>8} {ours:>9.4f} {old:>9.3f} {old / ours:>9.0f}")


def make_tree(root: str, files: int) -> None:
    per_dir = 50
    for i in range(files):
        path = Path(root, f"pkg{i // per_dir}", f"m{i % per_dir}.py")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(f"def f{k}(x):\n    return x + {k}\n\n\n" for k in range(20)))


def read_all(*roots: str) -> None:
    for root in roots:
        for top, _, names in os.walk(root):
            for name in names:
                Path(top, name).read_bytes()


def tree_rows(files: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        base, tree = os.path.join(tmp, "base"), os.path.join(tmp, "tree")
        make_tree(base, files)
        time.sleep(0.05)  # base older than its copy, as a judge tree is
        shutil.copytree(base, tree, symlinks=True)
        old = Path(base, "pkg0", "m1.py").read_bytes()
        apply_patch(
            tree, file_diff("pkg0/m1.py", old, old.replace(b"x + 3", b"x - 3"), 0o644, 0o644)
        )
        check = tree_check(base, tree)
        assert check.changed == ["pkg0/m1.py"] and not check.flags
        fast = best(lambda: tree_check(base, tree), 10)
        exact = best(lambda: tree_check(base, tree, exact=True), 5)
        full = best(lambda: read_all(base, tree), 5)
        print(
            f"tree_check, {files} files, one changed: stat fast path {fast * 1e3:.1f} ms, "
            f"exact {exact * 1e3:.1f} ms, reading both trees {full * 1e3:.1f} ms"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, nargs="+", default=[20_000, 40_000, 80_000])
    ap.add_argument("--files", type=int, default=2000)
    args = ap.parse_args()
    parse_rows(args.lines)
    tree_rows(args.files)


if __name__ == "__main__":
    main()
