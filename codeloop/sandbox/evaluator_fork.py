"""Zygote side of the evaluator child (see evaluator.py and judge.py): fork it, hand it
its frame without reading that frame ourselves, and link it to the job's model child.

Stdlib only; its source runs inside the zygote, after budget.py's and before zygote.py's
(pool.ZYGOTE_SRC); zygote.py passes in its ``_child`` and ``recv`` (no import back, so
the two modules form no cycle).
"""

import os


def start_evaluator(job, opts, workdir, pipes, limits, _child, recv):
    """Fork the job's evaluator; return the model child's ends of the call link.

    The evaluator reads its frame (setup and tests, expected values included) from the
    control pipe itself, so those bytes never enter this zygote's memory, nor so any model
    child forked from it. The model child is forked only after the evaluator said it has
    the whole frame, so the pipe then holds nothing of this job. ``pipes["ver"]`` is
    added: the evaluator's verdict pipe, whose write end no other process holds.
    """
    calls, answers, ready = os.pipe(), os.pipe(), os.pipe()
    pipes["ver"] = os.pipe()
    null = os.open("/dev/null", os.O_WRONLY)
    pid = os.fork()
    if pid == 0:
        try:
            os.close(ready[0])
            frame = recv(opts["ctl_fd"])
            os.write(ready[1], b"k")
        except BaseException:
            os._exit(71)
        fds = [null, null, pipes["ver"][1], answers[0], calls[1]]
        _child(job, opts, workdir, fds, limits, "run_evaluator", frame)
    for fd in (null, ready[1], answers[0], calls[1]):
        os.close(fd)
    got = os.read(ready[0], 1)  # blocks until the frame is read or the evaluator died
    os.close(ready[0])
    if got != b"k":
        os.waitpid(pid, 0)
        for fd in (calls[0], answers[1], *pipes.pop("ver")):
            os.close(fd)
        raise OSError(32, "the evaluator child could not read its frame")
    return [calls[0], answers[1]]
