"""Walking, handing over and removing a tree that sandboxed code may have shaped.

Stdlib only, zygote source: pool.ZYGOTE_SRC runs it before command.py and zygote.py (which
use it, as one ``python3 -I -S -c`` program, so it imports nothing of codeloop and its
names are shared with theirs); the host side (cmdjobs, agent.workspace, agent.fsops)
imports it as a module.

A job can leave any tree in its workspace or work dir: thousands of levels deep (a
recursive walker, os.walk or shutil.rmtree, dies of RecursionError), paths longer than
PATH_MAX (every call given a whole path fails with ENAMETOOLONG), links to anywhere. So
nothing here recurses or builds a path: each dir is opened by its name relative to its
parent's fd with O_NOFOLLOW (a link is itself changed or removed, never entered), and
only the dir being worked on is held open. The way back up is an open of ``..`` from the
child, checked against the (st_dev, st_ino) the parent had on the way down, so at most
two fds of ours are open whatever the depth, and the tree is never rearranged (a
handed-over workspace must stay as its command left it). The names still to visit are
kept per level: memory grows with the tree's size, as any listing's does, not the stack.
"""

import errno
import os
import stat

TREE_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _tree_open(parent_fd, name, unlock=False):
    """An fd of the dir ``name`` in ``parent_fd``, never through a link. ``unlock``: a dir
    its owner made unreadable (chmod 000) is first given rwx for its owner back."""
    try:
        return os.open(name, TREE_DIR_FLAGS, dir_fd=parent_fd)
    except PermissionError:
        if not unlock:
            raise
    os.chmod(name, stat.S_IRWXU, dir_fd=parent_fd, follow_symlinks=False)
    return os.open(name, TREE_DIR_FLAGS, dir_fd=parent_fd)


def _tree_entries(fd):
    """The entries of the dir ``fd`` (read whole: the caller may change the dir after)."""
    with os.scandir(fd) as it:
        return list(it)


def walk_dirs(top_fd, enter, leave=None, unlock=False):
    """Call ``enter(fd, st)`` in the dir ``top_fd`` and in every dir below it, parents
    first (``st``: the dir's fstat); it does what it must with the dir's own entries and
    returns the names of the subdirs to go into. ``leave(parent_fd, name)`` follows once a
    subdir and all below it are done. A subdir that is gone, or no dir any more, is
    skipped; one moved while walked raises OSError (ESTALE). ``top_fd`` stays the caller's."""
    fd = os.dup(top_fd)
    try:
        st = os.fstat(fd)
        stack = [((st.st_dev, st.st_ino), "", enter(fd, st))]
        while True:
            todo = stack[-1][2]
            if todo:
                name = todo.pop()
                try:
                    child = _tree_open(fd, name, unlock)
                except (FileNotFoundError, NotADirectoryError):
                    continue
                os.close(fd)
                fd = child
                st = os.fstat(fd)
                stack.append(((st.st_dev, st.st_ino), name, enter(fd, st)))
                continue
            _, name, _ = stack.pop()
            if not stack:
                return
            parent = os.open("..", TREE_DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = parent
            _tree_check(fd, stack[-1][0], name)
            if leave is not None:
                leave(fd, name)
    finally:
        os.close(fd)


def _tree_check(fd, ident, name):
    """The way back up from ``name`` led to ``fd``: it must be the dir ``ident`` the walk
    came down from (else ``name`` was moved meanwhile)."""
    st = os.fstat(fd)
    if (st.st_dev, st.st_ino) != ident:
        raise OSError(errno.ESTALE, f"dir {name[:64]!r} was moved while its tree was walked")


def visit_tree(path, visit):
    """Call ``visit(dir_fd, entry)`` for every entry below the dir ``path`` (an
    os.DirEntry named relative to ``dir_fd``), a dir before what it holds; links are
    visited, never entered. ``path`` itself is the caller's to handle."""

    def enter(fd, _st):
        subdirs = []
        for entry in _tree_entries(fd):
            visit(fd, entry)
            if entry.is_dir(follow_symlinks=False):
                subdirs.append(entry.name)
        return subdirs

    fd = os.open(path, TREE_DIR_FLAGS)
    try:
        walk_dirs(fd, enter)
    finally:
        os.close(fd)


def chown_tree(path, uid, gid):
    """``path`` and everything below it become uid:gid; a link is changed, not followed."""
    os.chown(path, uid, gid, follow_symlinks=False)
    if not stat.S_ISDIR(os.lstat(path).st_mode):
        return

    def chown(fd, entry):
        os.chown(entry.name, uid, gid, dir_fd=fd, follow_symlinks=False)

    visit_tree(path, chown)


def _tree_clear(fd, st):
    """Removal's ``enter``: unlink every entry of dir ``fd`` but its subdirs (returned).
    Not root: a dir of ours without rwx (the job took it away) gets it back first."""
    if os.geteuid() != 0 and st.st_uid == os.geteuid() and st.st_mode & 0o700 != 0o700:
        os.fchmod(fd, stat.S_IMODE(st.st_mode) | stat.S_IRWXU)
    subdirs = []
    for entry in _tree_entries(fd):
        if entry.is_dir(follow_symlinks=False):
            subdirs.append(entry.name)
            continue
        try:
            os.unlink(entry.name, dir_fd=fd)
        except FileNotFoundError:
            pass
    return subdirs


def _tree_rmdir(parent_fd, name):
    try:
        os.rmdir(name, dir_fd=parent_fd)
    except FileNotFoundError:
        pass


def empty_tree_fd(fd):
    """Remove everything below the dir ``fd``; the dir itself stays."""
    walk_dirs(fd, _tree_clear, _tree_rmdir, unlock=True)


def _tree_empty_at(parent_fd, name):
    fd = _tree_open(parent_fd, name, unlock=True)
    try:
        empty_tree_fd(fd)
    finally:
        os.close(fd)


def remove_tree_at(parent_fd, name):
    """Remove ``name`` in the dir ``parent_fd``: a file or link (itself), or a dir with
    everything below it, also what its owner made unreadable; nothing there is no error."""
    try:
        st = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        _tree_empty_at(parent_fd, name)
        os.rmdir(name, dir_fd=parent_fd)
    else:
        os.unlink(name, dir_fd=parent_fd)


def _tree_at_parent(path, do):
    """``do(parent_fd, name)`` for ``path``, relative to its parent dir (not a job's; it
    may be enterable only, as a workspace root without root is: O_PATH reads nothing)."""
    head, tail = os.path.split(os.path.normpath(path))
    parent = os.open(head or ".", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        do(parent, tail)
    finally:
        os.close(parent)


def remove_tree(path):
    """Remove ``path``, whatever it is (remove_tree_at); nothing there is no error."""
    _tree_at_parent(path, remove_tree_at)


def empty_tree(path):
    """Remove everything below the dir ``path``; the dir itself stays."""
    _tree_at_parent(path, _tree_empty_at)


def list_tree(path, skip=frozenset()):
    """(relpath, st_mode) of every entry below the dir ``path``, a dir before what it
    holds; a link is listed, never entered; dirs named in ``skip`` are listed, not
    entered; a dir that cannot be opened is listed, not entered."""
    out = []

    def listing(fd, rel):
        subdirs = []
        for entry in _tree_entries(fd):
            mode = entry.stat(follow_symlinks=False).st_mode
            out.append((f"{rel}/{entry.name}" if rel else entry.name, mode))
            if stat.S_ISDIR(mode) and entry.name not in skip:
                subdirs.append(entry.name)
        return subdirs

    fd = os.open(path, TREE_DIR_FLAGS)
    try:
        st = os.fstat(fd)
        stack = [((st.st_dev, st.st_ino), "", listing(fd, ""))]
        while True:
            _, rel, todo = stack[-1]
            if todo:
                name = todo.pop()
                try:
                    child = _tree_open(fd, name)
                except (FileNotFoundError, NotADirectoryError, PermissionError):
                    continue
                os.close(fd)
                fd = child
                st = os.fstat(fd)
                below = f"{rel}/{name}" if rel else name
                stack.append(((st.st_dev, st.st_ino), below, listing(fd, below)))
                continue
            _, done, _ = stack.pop()
            if not stack:
                return out
            parent = os.open("..", TREE_DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = parent
            _tree_check(fd, stack[-1][0], done)
    finally:
        os.close(fd)
