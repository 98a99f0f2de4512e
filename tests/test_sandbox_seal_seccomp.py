"""The seccomp filter: its syscall numbers are the kernel's, and inside a sandbox each
blocked call really answers EPERM (clone3: ENOSYS, so threads fall back to clone)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from codeloop.config import SandboxConfig
from codeloop.sandbox import ExecJob, make_executor
from codeloop.sandbox.docker_backend import skip_without_docker_engine
from codeloop.sandbox.seccomp import BLOCKED, CLONE, CLONE3

HEADERS = {
    "x86_64": Path("/usr/include/x86_64-linux-gnu/asm/unistd_64.h"),
    "aarch64": Path("/usr/include/asm-generic/unistd.h"),  # aarch64 uses the generic table
}


def kernel_numbers(arch: str) -> dict[str, int]:
    header = HEADERS[arch]
    if not header.exists():
        pytest.skip(f"{header} missing (Debian package linux-libc-dev)")
    return {
        m[1]: int(m[2]) for m in re.finditer(r"#define __NR_(\w+)\s+(\d+)\b", header.read_text())
    }


@pytest.mark.parametrize("arch", sorted(BLOCKED))
def test_the_blocked_syscall_numbers_are_the_kernels(arch):
    nrs = kernel_numbers(arch)
    ours = {**BLOCKED[arch], "clone": CLONE[arch], "clone3": CLONE3}
    assert {name: nrs.get(name) for name in ours} == ours


@pytest.mark.parametrize("backend", ["local", pytest.param("docker", marks=pytest.mark.docker)])
def test_every_blocked_syscall_answers_eperm_inside_the_sandbox(backend):
    if backend == "docker":
        skip_without_docker_engine()
    arch = os.uname().machine
    if arch not in BLOCKED:
        pytest.skip(f"no seccomp table for {arch}")
    code = (
        "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        f"def f(x):\n bad = {{}}\n for name, nr in {sorted(BLOCKED[arch].items())!r}:\n"
        "  rc = libc.syscall(nr, 0, 0, 0, 0, 0, 0)\n"
        "  if rc != -1 or ctypes.get_errno() != 1: bad[name] = (rc, ctypes.get_errno())\n"
        f" if libc.syscall({CLONE3}, 0, 0) != -1 or ctypes.get_errno() != 38: bad['clone3'] = 1\n"
        " return bad"
    )
    with make_executor(SandboxConfig(backend=backend, workers=1)) as ex:
        r = ex.run(ExecJob(code=code, tests=["assert f(0) == {}"]))
    assert r.passed, (r.status, [t.got for t in r.test_results])
