"""Command jobs (stdlib only, zygote source): run an argv in an agent's workspace, sealed.

A job with ``cmd`` (``{"argv", "cwd", "ws", "env", "bind"}``) is forked like every job
(rlimits, leased uid, no capabilities, seccomp, scrubbed environment, fresh private work
dir as HOME/TMPDIR), but instead of the harness the child ``execve``s the argv in ``cwd``.
fds: 0 /dev/null, 1 stdout, 2 stderr, 3 the result pipe (``CODELOOP_RESULT_FD``: our pytest
plugin writes outcomes there); nothing else stays open. The zygote's clean-up is the usual
one: every process the command left is killed, the work dir and scratch are swept; the
workspace itself persists (it is the episode's).

Local backend (``bind``): the executor's whole workspace root is bound read-write at
/.ws-hidden/all, below /.ws-hidden, mode 000 on the read-only root (no job holds a
capability to pass it, and the read-only root refuses a chmod). For each command the
zygote binds that command's own workspace at /ws and detaches it after, so a job's /ws is
its tree, ``..`` of it is the root, and no other episode's workspace has a path it can
reach, as root and as an ordinary user alike (where one uid owns every workspace). Binding
per job needs mount in the zygote, so such a zygote leaves the seccomp filter to each
child (built once, installed in ``_enter`` before anything of the job runs). Where the
host gives each workspace a tmpfs of its own (cmdjobs.WorkspaceRoot's quota), that tmpfs is
mounted after the zygote started and reaches it through the workspace root's bind, a slave
of the host's shared mount (seal.py): /ws is then that tmpfs, and a write past its size
fails with ENOSPC.
Docker (no mount in a container): the workspace root is a volume at /ws (mode 0711, not
listable) and a command runs in /ws/<token>; the host hands the workspace to the
container's uid before the command and back to root (mode 0700) after, so between its
commands it is unreadable even to a job that knows its 128-bit token.

As root the workspace is handed to the slot's leased uid before the command and back to
root after it (``lchown`` over the tree, never following a link: only our own host-side
tools and earlier commands of this episode wrote there, and every process of those
commands is dead by then). Those commands shaped the tree (any depth, any path length:
trees.py walks it by dir fds), so a hand-over that still fails is that command's result
(``ws_error``: it does not run, or its workspace was not taken back), never a fault of the
zygote's.
"""

import os

try:  # for linters and tests; as the zygote, seal.py's source runs before this one
    from codeloop.sandbox.seal import (
        MNT_DETACH,
        MS_BIND,
        MS_NODEV,
        MS_NOSUID,
        MS_PRIVATE,
        MS_REMOUNT,
        mount,
        sys_libc,
    )
    from codeloop.sandbox.trees import chown_tree
except ImportError:
    pass

WS_MOUNT = "/ws"
WS_HIDDEN = "/.ws-hidden"  # mode 000 on the read-only root; the zygote alone passes it
WS_ALL = WS_HIDDEN + "/all"  # the whole workspace root (local backend)
EXEC_FAILED = 127  # as a shell says: the argv's program is missing or not executable


def command_problem(cmd):
    """Why ``cmd`` may not run ('' when it may). ``bind``: ``ws`` is a workspace under
    WS_ALL, bound at /ws for this job, and ``cwd`` lies under /ws; otherwise (docker) ``ws``
    is /ws/<token> itself and ``cwd`` lies under it."""
    ws, cwd = cmd.get("ws", ""), cmd.get("cwd", "")
    if not cmd.get("argv") or not all(isinstance(a, str) for a in cmd["argv"]):
        return "cmd.argv must be a non-empty list of strings"
    parent, top = (WS_ALL, WS_MOUNT) if cmd.get("bind") else (WS_MOUNT, ws)
    if os.path.dirname(ws) != parent or os.path.normpath(ws) != ws or ws == parent:
        return f"cmd.ws {ws!r} is not a workspace under {parent}"
    if os.path.normpath(cwd) != cwd or not (cwd == top or cwd.startswith(top + "/")):
        return f"cmd.cwd {cwd!r} is not inside {top!r}"
    return ""


def bind_workspace(ws):
    """Bind workspace ``ws`` (under WS_ALL) at /ws for the next job: the job's /ws is its own
    tree, whose parent is the root; no other workspace has a path it can reach. Private: the
    host's mounts never change it while the job runs."""
    unbind_workspace()
    mount(ws, WS_MOUNT, None, MS_BIND)
    mount(None, WS_MOUNT, None, MS_PRIVATE)
    mount(None, WS_MOUNT, None, MS_REMOUNT | MS_BIND | MS_NOSUID | MS_NODEV)


def unbind_workspace():
    """Detach whatever is bound at /ws (EINVAL: nothing is)."""
    sys_libc.umount2(WS_MOUNT.encode(), MNT_DETACH)


def hand_over(ws, uid):
    """As root: make the workspace ``uid``'s (lchown: a link is changed, not followed). The
    zygote hands it to the slot's uid before the command and back to itself after, so a
    later command of another episode on the same slot (same uid) cannot open it either."""
    if uid is None or os.getuid() != 0:
        return
    os.lchown(ws, uid, uid)  # the top first: once it is root's 0700 no other job gets in
    os.chmod(ws, 0o700)  # whatever mode the command gave it: its token is no key for others
    chown_tree(ws, uid, uid)


def hand_over_problem(ws, uid):
    """hand_over, '' when done; else why not (the tree the episode's commands left)."""
    try:
        hand_over(ws, uid)
    except OSError as e:
        return f"cannot hand the workspace {'back' if uid == 0 else 'over'}: {e}"
    return ""


def exec_command(cmd):
    """In the sealed child, fds already in place: become the command. Never returns."""
    env = dict(os.environ)
    env.update(cmd.get("env") or {})
    env["CODELOOP_RESULT_FD"] = "3"
    try:
        os.chdir(cmd["cwd"])
        os.execvpe(cmd["argv"][0], cmd["argv"], env)
    except OSError as e:
        os.write(2, f"cannot run {cmd['argv'][0]!r}: {e}\n".encode())
    os._exit(EXEC_FAILED)


def before_command(cmd, opts):
    """In the zygote before the fork: None when ``cmd`` may run, its workspace then bound at
    /ws (local) and the slot uid's; else the job's answer: a fault (our frame is wrong) or
    ``ws_error`` (the workspace could not be handed over: the command does not run)."""
    problem = command_problem(cmd)
    if problem:
        return {"fault": problem}
    if cmd.get("bind"):
        bind_workspace(cmd["ws"])
    problem = hand_over_problem(cmd["ws"], opts.get("uid"))
    if problem:
        back = after_command(cmd, opts)
        return {"ws_error": "; ".join(p for p in (problem, back) if p)}
    return None


def after_command(cmd, opts):
    """In the zygote once every process of the job is dead: the workspace is root's again
    (mode 0700) and /ws is detached. '' when it is; else why not (the command's ws_error)."""
    problem = ""
    if opts.get("uid") is not None:
        problem = hand_over_problem(cmd["ws"], 0)
    if cmd.get("bind"):
        unbind_workspace()
    return problem
