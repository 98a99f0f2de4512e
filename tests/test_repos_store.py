"""The snapshot store: one copy per distinct tree, hashed over paths, bytes and exec bits."""

from __future__ import annotations

import os

import pytest

from codeloop.data.repos.store import (
    SnapshotError,
    files_hash,
    prune_snapshots,
    snapshot_path,
    store_files,
    store_snapshot,
    tree_hash,
    verify_snapshot,
)


def _tree(root, files):
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return root


FILES = {
    "pkg/__init__.py": "",
    "pkg/a.py": "def f():\n    return 1\n",
    "tests/test_a.py": "x = 1\n",
}


def test_the_same_tree_stored_twice_is_one_copy(tmp_path):
    src = _tree(tmp_path / "src", FILES)
    repos = tmp_path / "repos"
    assert store_snapshot(src, repos) == store_snapshot(src, repos)
    assert [p.name for p in repos.iterdir()] == [tree_hash(src)]


def test_the_stored_copy_holds_the_same_files(tmp_path):
    sha = store_snapshot(_tree(tmp_path / "src", FILES), tmp_path / "repos")
    root = snapshot_path(tmp_path / "repos", sha)
    got = {p.relative_to(root).as_posix(): p.read_text() for p in root.rglob("*") if p.is_file()}
    assert got == FILES


def test_one_changed_byte_is_a_new_snapshot(tmp_path):
    a = tree_hash(_tree(tmp_path / "a", FILES))
    b = tree_hash(_tree(tmp_path / "b", {**FILES, "pkg/a.py": "def f():\n    return 2\n"}))
    assert a != b


def test_the_exec_bit_is_part_of_the_hash(tmp_path):
    src = _tree(tmp_path / "src", FILES)
    before = tree_hash(src)
    os.chmod(src / "pkg/a.py", 0o755)
    assert tree_hash(src) != before


def test_git_metadata_and_caches_are_not_part_of_a_tree(tmp_path):
    plain = tree_hash(_tree(tmp_path / "a", FILES))
    extra = {
        **FILES,
        ".git/HEAD": "ref: refs/heads/main\n",
        "pkg/__pycache__/a.cpython-311.pyc": "x",
    }
    assert tree_hash(_tree(tmp_path / "b", extra)) == plain


def test_an_in_memory_tree_hashes_like_the_same_tree_on_disk(tmp_path):
    assert files_hash(FILES) == tree_hash(_tree(tmp_path / "src", FILES))
    sha = store_files(FILES, tmp_path / "repos")
    assert tree_hash(snapshot_path(tmp_path / "repos", sha)) == sha


def test_verify_finds_a_stored_file_changed_after_storing(tmp_path):
    sha = store_files(FILES, tmp_path / "repos")
    verify_snapshot(tmp_path / "repos", sha)  # intact: no error
    (snapshot_path(tmp_path / "repos", sha) / "pkg/a.py").write_text("tampered\n")
    with pytest.raises(SnapshotError, match="corrupt"):
        verify_snapshot(tmp_path / "repos", sha)


def test_a_missing_snapshot_is_an_error_naming_it(tmp_path):
    with pytest.raises(SnapshotError, match="abc123 is not stored"):
        snapshot_path(tmp_path, "abc123")


def test_a_symlink_in_the_source_is_refused(tmp_path):
    src = _tree(tmp_path / "src", FILES)
    (src / "pkg" / "link.py").symlink_to("/etc/passwd")
    with pytest.raises(SnapshotError, match="symlink"):
        store_snapshot(src, tmp_path / "repos")


def test_a_path_leaving_the_tree_is_refused(tmp_path):
    with pytest.raises(SnapshotError, match="leaves the tree"):
        store_files({"../evil.py": "x"}, tmp_path / "repos")
    assert not (tmp_path / "evil.py").exists()


def test_prune_keeps_only_the_named_snapshots(tmp_path):
    a = store_files(FILES, tmp_path / "repos")
    b = store_files({**FILES, "README.md": "hi\n"}, tmp_path / "repos")
    assert prune_snapshots(tmp_path / "repos", [a]) == [b]
    assert [p.name for p in (tmp_path / "repos").iterdir()] == [a]
