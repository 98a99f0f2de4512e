"""The plain backend: a fresh interpreter for every job (no warm state, no namespaces).

Same child protocol, rlimits, uid drop and clean-up as the zygote backend, but it pays a
whole interpreter start per job; it is the reference the faster backends are checked
against and the fallback where nothing else works.
"""

from __future__ import annotations

import os
import shutil
import tempfile

from codeloop.config import SandboxConfig
from codeloop.sandbox.pool import PoolExecutor, Zygote, zygote_opts


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
        )
        self.isolation = "fresh interpreter per job; rlimits; uid drop when root; no namespaces"

    def close(self) -> None:
        super().close()
        shutil.rmtree(self.work_root, ignore_errors=True)
