"""Command jobs (stdlib only, zygote source): run an argv in an agent's workspace, sealed.

A job with ``cmd`` (``{"argv", "cwd", "ws", "env"}``) is forked like every job (rlimits,
leased uid, no capabilities, seccomp, scrubbed environment, fresh private work dir as
HOME/TMPDIR), but instead of the harness the child ``execve``s the argv in ``cwd``, a
directory inside the workspace ``ws`` (``/ws/<token>``, a writable bind of the executor's
workspace root, itself mode 0711: a job can enter its own workspace but not list the
others). fds: 0 /dev/null, 1 stdout, 2 stderr, 3 the result pipe (``CODELOOP_RESULT_FD``:
our pytest plugin writes outcomes there); nothing else stays open. The zygote's clean-up
is the usual one: every process the command left is killed, the work dir and scratch are
swept; the workspace itself persists (it is the episode's).

As root the workspace is handed to the slot's leased uid before the command and back to
root after it (``lchown`` over the tree, never following a link: only our own host-side
tools and earlier commands of this episode wrote there, and every process of those commands
is dead by then), so between its commands a workspace is root's, mode 0700. Without root
(a user namespace maps one uid) every workspace is the invoking user's, and so is /ws
(mode 0311): a command cannot list it, but as its owner it could chmod it and then list
the other workspaces of the same executor (never a hidden test or a reference patch:
those are in no workspace). Isolation between concurrent episodes needs root or docker.
"""

import os

WS_MOUNT = "/ws"
EXEC_FAILED = 127  # as a shell says: the argv's program is missing or not executable


def command_problem(cmd):
    """Why ``cmd`` may not run ('' when it may): cwd must lie in a workspace under /ws."""
    ws, cwd = cmd.get("ws", ""), cmd.get("cwd", "")
    if not cmd.get("argv") or not all(isinstance(a, str) for a in cmd["argv"]):
        return "cmd.argv must be a non-empty list of strings"
    if os.path.dirname(ws) != WS_MOUNT or os.path.normpath(ws) != ws or ws == WS_MOUNT:
        return f"cmd.ws {ws!r} is not a workspace under {WS_MOUNT}"
    if os.path.normpath(cwd) != cwd or not (cwd == ws or cwd.startswith(ws + "/")):
        return f"cmd.cwd {cwd!r} is not inside {ws!r}"
    return ""


def hand_over(ws, uid):
    """As root: make the workspace ``uid``'s (lchown: a link is changed, not followed). The
    zygote hands it to the slot's uid before the command and back to itself after, so a
    later command of another episode on the same slot (same uid) cannot open it either."""
    if uid is None or os.getuid() != 0:
        return
    os.lchown(ws, uid, uid)
    os.chmod(ws, 0o700)  # whatever mode the command gave it: its token is no key for others
    for top, dirs, files in os.walk(ws):  # followlinks=False: a linked dir is not entered
        for name in dirs + files:
            os.lchown(os.path.join(top, name), uid, uid)


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
