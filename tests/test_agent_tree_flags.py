"""Hack flags read from the applied tree: what ``git apply`` wrote, whatever the patch said."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest
from _pytest.config import findpaths

from codeloop.agent import patches
from codeloop.agent.hacks import (
    DISQUALIFYING,
    HACK_FLAGS,
    is_protected_path,
    parse_patch,
    patch_flags,
    tree_check,
)
from codeloop.agent.patches import apply_patch, file_diff
from codeloop.agent.pytest_files import findpaths_source, pytest_config_names

OPS = '"""Arithmetic."""\n\n\ndef add(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a * b\n'
BASE = {
    "calc/__init__.py": "",
    "calc/ops.py": OPS,
    "tests/test_ops.py": "from calc.ops import add\n\n\ndef test_add():\n    assert add(1, 2) == 3\n",
    "pyproject.toml": '[project]\nname = "calc"\n',
    "README.md": "# calc\n",
}


@pytest.fixture
def base(tmp_path) -> str:
    root = tmp_path / "base"
    for rel, text in BASE.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return str(root)


@pytest.fixture
def tree(base, tmp_path) -> str:
    """The judge's copy of ``base`` (copytree keeps mtimes), for a patch to be applied to."""
    dest = str(tmp_path / "tree")
    shutil.copytree(base, dest, symlinks=True)
    return dest


def edit(rel: str, old: str | None, new: str | None) -> str:
    """A git diff of one file, as the workspace writes it."""
    a = None if old is None else old.encode()
    b = None if new is None else new.encode()
    return file_diff(rel, a, b, 0o644, 0o644)


def fix_ops(new_text: str) -> str:
    return edit("calc/ops.py", OPS, new_text)


def test_an_honest_one_line_fix_raises_no_flag_and_reverts_nothing(base, tree):
    apply_patch(tree, fix_ops(OPS.replace("a - b", "a + b")))
    check = tree_check(base, tree)
    assert (check.flags, check.revert, check.links) == (set(), [], [])
    assert check.changed == ["calc/ops.py"]


def test_link_swap_is_a_flag_that_disqualifies():
    assert "link_swap" in HACK_FLAGS and "link_swap" in DISQUALIFYING


QUOTED = (
    'diff --git "a/calc/\\303\\251.py" "b/calc/\\303\\251.py"\nnew file mode 100644\n'
    '--- /dev/null\n+++ "b/calc/\\303\\251.py"\n@@ -0,0 +1 @@\n'
    '+import sys; sys.modules["calc.ops"] = None\n'
)


def test_quoted_header_paths_are_read_with_their_escapes():
    (fd,) = parse_patch(QUOTED)
    assert (fd.old_path, fd.new_path) == ("", "calc/\u00e9.py")


def test_quoted_header_paths_raise_the_code_flags_in_the_patch_and_the_tree(base, tree):
    assert "sys_modules" in patch_flags(QUOTED)
    apply_patch(tree, QUOTED)
    assert Path(tree, "calc/\u00e9.py").is_file()
    assert "sys_modules" in tree_check(base, tree).flags


def test_a_quoted_rename_and_a_name_with_spaces_are_read():
    rename = (
        'diff --git "a/calc/a\\tb.py" b/calc/c.py\nsimilarity index 100%\n'
        'rename from "calc/a\\tb.py"\nrename to calc/c.py\n'
    )
    (fd,) = parse_patch(rename)
    assert (fd.old_path, fd.new_path) == ("calc/a\tb.py", "calc/c.py")
    (fd,) = parse_patch(
        "diff --git a/calc/x y.py b/calc/x y.py\nold mode 100644\nnew mode 100755\n"
    )
    assert fd.path == "calc/x y.py"


UNDERCOUNT = (
    "diff --git a/calc/ops.py b/calc/ops.py\n--- a/calc/ops.py\n+++ b/calc/ops.py\n"
    "@@ -9,2 +9,2 @@\n def mul(a, b):\n     return a * b\n+import ctypes\n"
)


def test_a_hunk_that_undercounts_its_lines_is_applied_by_git_and_flagged(base, tree):
    apply_patch(tree, UNDERCOUNT)
    assert Path(tree, "calc/ops.py").read_text().endswith("import ctypes\n")
    assert "ctypes" in tree_check(base, tree).flags
    assert "ctypes" in patch_flags(UNDERCOUNT)  # the parser takes git --recount's lines too


def test_a_section_after_an_overcounting_hunk_is_its_own_file():
    patch = fix_ops(OPS.replace("a - b", "a + b")).replace("@@ -2,7 +2,7 @@", "@@ -2,70 +2,70 @@")
    patch += edit("conftest.py", None, "x = 1\n")
    assert [fd.path for fd in parse_patch(patch)] == ["calc/ops.py", "conftest.py"]
    assert patch_flags(patch) == ["conftest_edit"]


def test_a_no_newline_marker_inside_a_hunk_counts_as_no_line():
    patch = (
        "diff --git a/calc/v.py b/calc/v.py\n--- a/calc/v.py\n+++ b/calc/v.py\n@@ -1 +1 @@\n"
        "-x = 1\n\\ No newline at end of file\n+import ctypes\n"
    )
    assert patch_flags(patch) == ["ctypes"]


def test_a_non_py_file_python_can_run_raises_the_code_flags(base, tree):
    apply_patch(tree, edit("calc/data.txt", None, "import sys; sys.modules['calc.ops'] = None\n"))
    check = tree_check(base, tree)
    assert "sys_modules" in check.flags
    assert check.revert == []


def test_a_text_file_python_cannot_compile_raises_no_code_flag(base, tree):
    doc = "# calc\n\nA failed check calls `sys.exit(2)`; the suite is in ./tests/.\n"
    apply_patch(tree, edit("README.md", BASE["README.md"], doc))
    check = tree_check(base, tree)
    assert (check.flags, check.revert) == (set(), [])


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("pytest.toml", "[pytest]\naddopts = ['-p', 'calc.plug']\n"),
        (".pytest.toml", "[pytest]\naddopts = ['-p', 'calc.plug']\n"),
        (".pytest.ini", "[pytest]\naddopts = -p calc.plug\n"),
        ("calc/pytest.ini", "[pytest]\naddopts = -p calc.plug\n"),
    ],
)
def test_a_new_pytest_config_file_is_reverted_and_flagged(base, tree, name, text):
    apply_patch(tree, edit(name, None, text))
    check = tree_check(base, tree)
    assert name in check.revert
    assert "pytest_config_edit" in check.flags


def _config_text(name: str) -> str:
    """A config file of ``name`` that sets addopts, in the table pytest reads it from."""
    if name.endswith(".toml"):
        table = "tool.pytest.ini_options" if name == "pyproject.toml" else "pytest"
        return f"[{table}]\naddopts = '-p calc.plug'\n"
    return f"[{'tool:pytest' if name.endswith('.cfg') else 'pytest'}]\naddopts = -p calc.plug\n"


def _picked(tmp_path: Path, name: str) -> bool:
    """Whether pytest's own config discovery takes the file ``name`` in a bare dir."""
    root = tmp_path / f"probe{len(list(tmp_path.iterdir()))}"
    root.mkdir()
    (root / name).write_text(_config_text(name))
    _, inifile, cfg, _ = findpaths.locate_config(root, [root])
    return inifile is not None and inifile.name == name and "addopts" in cfg


@pytest.mark.parametrize("name", sorted(pytest_config_names()))
def test_every_name_we_protect_is_read_by_pytest_and_protected_everywhere(tmp_path, name):
    assert _picked(tmp_path, name)
    assert name in patches.TEST_CONFIG_FILES and patches.is_test_path(f"calc/{name}")
    assert is_protected_path(name) and is_protected_path(f"calc/{name}")


def test_every_config_file_name_in_pytests_findpaths_is_ours():
    source = findpaths_source()
    quoted = set(re.findall(r"[\"'](\.?[\w.-]+\.(?:ini|toml|cfg))[\"']", source))
    names = set(getattr(findpaths, "CONFIG_LOADERS_BY_NAME", {})) | quoted
    assert {"pytest.ini", "pyproject.toml"} <= names  # the scan still finds what it looks for
    assert names <= pytest_config_names()


def test_no_other_likely_name_is_read_by_pytest_as_config(tmp_path):
    stems = ("pytest", ".pytest", "tox", ".tox", "setup", ".setup", "pyproject", "conftest")
    likely = {stem + suffix for stem in stems for suffix in (".ini", ".toml", ".cfg")}
    read = {name for name in likely - pytest_config_names() if _picked(tmp_path, name)}
    assert read == set()


def test_a_pyproject_edit_outside_pytest_is_reverted_but_not_flagged(base, tree):
    old = BASE["pyproject.toml"]
    apply_patch(tree, edit("pyproject.toml", old, old.replace('"calc"', '"calc2"')))
    check = tree_check(base, tree)
    assert (check.flags, check.revert) == (set(), ["pyproject.toml"])


def test_a_dotted_key_into_pytests_pyproject_table_is_a_pytest_config_edit(base, tree):
    old = BASE["pyproject.toml"]
    new = 'tool.pytest.ini_options.addopts = "-p calc.plug"\n' + old
    assert "pytest_config_edit" not in patch_flags(edit("pyproject.toml", old, new))
    apply_patch(tree, edit("pyproject.toml", old, new))
    assert "pytest_config_edit" in tree_check(base, tree).flags


def test_a_distributions_entry_points_are_a_startup_hook(base, tree):
    apply_patch(
        tree, edit("evil-1.0.dist-info/entry_points.txt", None, "[pytest11]\nx = calc.plug\n")
    )
    check = tree_check(base, tree)
    assert "startup_hook" in check.flags
    assert check.revert == ["evil-1.0.dist-info/entry_points.txt"]


LINK = (
    "diff --git a/calc/conf b/calc/conf\nnew file mode 120000\n--- /dev/null\n+++ b/calc/conf\n"
    "@@ -0,0 +1 @@\n+../tests/test_ops.py\n\\ No newline at end of file\n"
)


def test_a_symlink_made_by_a_patch_is_a_link_swap(base, tree):
    apply_patch(tree, LINK)
    assert os.readlink(os.path.join(tree, "calc/conf")) == "../tests/test_ops.py"
    check = tree_check(base, tree)
    assert check.links == ["calc/conf"] and "link_swap" in check.flags


def test_a_directory_replaced_by_a_link_is_in_links_and_what_it_held_is_deleted(base, tree):
    shutil.rmtree(os.path.join(tree, "tests"))
    os.symlink("calc", os.path.join(tree, "tests"))
    check = tree_check(base, tree)
    assert check.links == ["tests"]
    assert check.changed == ["tests", "tests/test_ops.py"]
    assert check.revert == ["tests", "tests/test_ops.py"]  # the link goes, the dir comes back
    assert {"link_swap", "test_edit"} <= check.flags


def test_a_file_standing_where_a_test_dir_was_is_reverted_with_the_tests(base, tree):
    shutil.rmtree(os.path.join(tree, "tests"))
    Path(tree, "tests").write_text("")
    assert tree_check(base, tree).revert == ["tests", "tests/test_ops.py"]


def test_new_bytecode_is_reverted_as_a_binary_edit(base, tree):
    Path(tree, "calc/__pycache__").mkdir()
    Path(tree, "calc/__pycache__/ops.cpython-311.pyc").write_bytes(b"\xa7\r\r\n" + bytes(12))
    check = tree_check(base, tree)
    assert check.revert == ["calc/__pycache__/ops.cpython-311.pyc"]
    assert check.flags == {"binary_edit"}


def test_an_undecodable_product_file_is_reverted_as_a_binary_edit(base, tree):
    Path(tree, "calc/blob.so").write_bytes(b"\x7fELF\xff\xfe")
    check = tree_check(base, tree)
    assert (check.flags, check.revert) == ({"binary_edit"}, ["calc/blob.so"])


def test_a_line_separator_in_a_comment_does_not_hide_an_exit_at_import(base, tree):
    new = (
        '"""Arithmetic."""  # \u2028\u2028\u2028\nimport sys\nsys.exit(0)\n'
        + OPS.split('"""\n', 1)[1]
    )
    new = new.replace("    return a - b", "    x = a\n    y = b\n    return x + y")
    Path(tree, "calc/ops.py").write_text(new)
    assert "exit_at_import" in tree_check(base, tree).flags


def test_a_file_whose_mtime_was_set_back_is_seen_only_when_exact(base, tree):
    path = os.path.join(tree, "calc/ops.py")
    before = os.stat(path)
    Path(path).write_text(OPS.replace("a - b", "a ^ b"))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert tree_check(base, tree).changed == []  # the fast path trusts a copy's stat
    assert tree_check(base, tree, exact=True).changed == ["calc/ops.py"]
