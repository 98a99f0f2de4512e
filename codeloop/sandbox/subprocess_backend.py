"""The plain backend: a fresh interpreter for every job (no warm state, no namespaces).

Same child protocol, rlimits, uid drop, capability drop, no_new_privs, seccomp and clean-up
as the zygote backend, but no namespaces and no private root (the host's filesystem is
visible), and it pays a whole interpreter start per job. It is the reference the faster
backends are checked against, and it is exempt from ``sandbox.require`` here: it starts
whatever it achieves (``isolation`` says what), while ``codeloop preflight`` and
``codeloop exec`` refuse it under the default requirement. Never judge untrusted code with it.
"""

from __future__ import annotations

import os
import tempfile

from codeloop.config import SandboxConfig
from codeloop.sandbox.pool import PoolExecutor, Zygote, zygote_opts
from codeloop.sandbox.trees import remove_tree


class SubprocessExecutor(PoolExecutor):
    """``backend: subprocess``: one short-lived zygote per job."""

    def __init__(self, cfg: SandboxConfig) -> None:
        self.work_root = tempfile.mkdtemp(prefix="codeloop-sbx-")
        os.chmod(self.work_root, 0o711)  # job dirs below are owned by the job's uid
        opts = {"preload": []}
        super().__init__(
            cfg,
            lambda slot: Zygote([], zygote_opts(self.uids[slot], self.work_root, **opts)),
            fresh_per_job=True,
            backend="subprocess",
            enforce=False,
        )

    def close(self) -> None:
        super().close()
        try:  # job dirs a failed sweep left: the jobs' trees, any depth
            remove_tree(self.work_root)
        except OSError:
            pass
