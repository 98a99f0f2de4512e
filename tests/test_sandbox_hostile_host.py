"""Hostile programs against the seal: reading the host, undoing the root, regaining privileges.

Each case runs through the same checks as test_sandbox_hostile (no pass, bounded, no process
left, scratch empty, no host file, the next job passes) on local and docker, and, through
test_sandbox_seal_nonroot, as an ordinary user. A case returns 7919, the expected value,
only when its attack worked: it found a planted dataset row, could open a host file, or a
forbidden call succeeded. The rows are planted in world-readable files at many host paths.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from codeloop.sandbox import ExecJob
from codeloop.sandbox.isolation import FULL_SEAL
from tests import _hostile
from tests._hostile import PLANT_DIRS, PLANT_NAME, PLANT_ROW, TESTS, assert_no_pass_and_no_trace

executor, listener = _hostile.executor, _hostile.listener  # the shared fixtures, by name

REPO = Path(__file__).resolve().parents[1]
HOST_FILES = [str(REPO / "pyproject.toml"), str(REPO / "codeloop" / "config.py"),
              str(REPO.parent / "shared" / "data" / "mbpp.jsonl"), os.path.join(sys.prefix, "pyvenv.cfg"),
              str(Path(__file__).resolve())]
P = "import os, sys, re, ctypes, time, resource, subprocess\nlibc = ctypes.CDLL(None, use_errno=True)\n"
WIN = "7919"

CASES = {
    "read_planted_dataset_rows": P + (
        f"def f(x):\n for d in {PLANT_DIRS!r}:\n"
        f"  try: m = re.search(r'== (\\d+)', open(os.path.join(d, {PLANT_NAME!r})).read())\n"
        "  except OSError: continue\n  if m: return int(m.group(1))\n return 0"
    ),
    "read_repo_venv_and_shared": P + (
        f"def f(x):\n for p in {HOST_FILES!r}:\n"
        f"  try: open(p).read(1); return {WIN}\n  except OSError: pass\n return 0"
    ),
    "walk_the_whole_filesystem_for_answers": P + (
        "def f(x):\n for top, dirs, files in os.walk('/'):\n"
        "  if top in ('/proc', '/sys'): dirs[:] = []; continue\n"
        "  for n in files:\n"
        "   if 'hostile-plant' in n or 'mbpp' in n or n.endswith('.parquet') or 'HumanEval' in n:\n"
        f"    return {WIN}\n return 0"
    ),
    "reach_the_host_through_proc_root_and_cwd": P + (
        "def f(x):\n for pid in ['1', 'self', str(os.getppid())] + [p for p in os.listdir('/proc') if p.isdigit()]:\n"
        "  for via in ('root', 'cwd'):\n"
        f"   for d in {PLANT_DIRS!r}:\n"
        f"    try: open(f'/proc/{{pid}}/{{via}}{{d}}/{PLANT_NAME}').read(); return {WIN}\n"
        "    except OSError: pass\n return 0"
    ),
    "remount_the_root_read_write": P + (
        "def f(x):\n for t in (b'/', b'/usr', b'/tmp', b'/proc'):\n"
        f"  if libc.mount(None, t, None, 32 | 4096, None) == 0 or libc.mount(None, t, None, 32, None) == 0: return {WIN}\n"
        " for p in ('/hostile', '/usr/hostile', '/usr/bin/hostile', '/dev/hostile'):\n"
        f"  try: open(p, 'w').write('x'); return {WIN}\n  except OSError: pass\n return 0"
    ),
    "mount_tmpfs_over_the_work_dir": P + (
        f"def f(x):\n if libc.mount(b'tmpfs', os.getcwd().encode(), b'tmpfs', 0, None) == 0: return {WIN}\n"
        f" if libc.mount(b'/usr', b'/tmp', None, 4096, None) == 0: return {WIN}\n return 0"
    ),
    "pivot_or_chroot_back_out": P + (
        "def f(x):\n os.makedirs('jail', exist_ok=True)\n"
        f" if libc.chroot(b'jail') == 0:\n  os.chdir('../../../../..'); libc.chroot(b'.'); return {WIN}\n"
        f" if libc.syscall(155, b'.', b'.') == 0 or libc.umount2(b'/', 2) == 0: return {WIN}\n"
        f" if libc.unshare(0x10000000 | 0x20000) == 0: return {WIN}\n"
        f" if libc.setns(os.open('/proc/1/ns/mnt', os.O_RDONLY), 0) == 0: return {WIN}\n return 0"
    ),
    "clone_into_a_new_user_namespace": P + (
        "def f(x):\n for flags in (0x10000000, 0x10000000 | 0x20000, 0x20000000, 0x40000000):\n"
        "  pid = libc.syscall(56, flags | 17, 0, 0, 0, 0)\n"
        f"  if pid == 0: os._exit(0)\n  if pid > 0: os.waitpid(pid, 0); return {WIN}\n"
        f" if libc.syscall(435, 0, 0) >= 0: return {WIN}\n return 0"
    ),
    "exec_to_regain_capabilities": P + (
        "def f(x):\n out = subprocess.run([sys.executable, '-c', \"print(open('/proc/self/status').read())\"],\n"
        "                      capture_output=True, text=True).stdout\n"
        " caps = [l for l in out.splitlines() if l.startswith('Cap') and not l.startswith('CapBnd')]\n"
        f" if any(int(l.split()[1], 16) for l in caps): return {WIN}\n"
        " for cmd in (['/usr/bin/unshare', '-r', 'true'], ['/usr/bin/su', '-c', 'true'], ['/usr/bin/mount', '-t', 'tmpfs', 'x', '/tmp']):\n"
        f"  try:\n   if subprocess.run(cmd, capture_output=True).returncode == 0: return {WIN}\n"
        "  except OSError: pass\n return 0"
    ),
    "ptrace_the_zygote_a_sibling_and_a_child": P + (
        "def f(x):\n kid = os.fork()\n if kid == 0: time.sleep(30)\n"
        f" for pid in (1, os.getppid(), kid):\n  if libc.ptrace(16, pid, None, None) == 0: return {WIN}\n"
        f" if libc.ptrace(0, 0, None, None) == 0: return {WIN}\n"
        " buf = ctypes.create_string_buffer(8)\n"
        f" if libc.process_vm_readv(1, None, 0, None, 0, 0) >= 0: return {WIN}\n return 0"
    ),
    "raise_every_rlimit_then_run_forever": P + (
        "def f(x):\n raised = False\n for r in range(16):\n"
        "  try:\n   soft, hard = resource.getrlimit(r)\n"
        "   if hard != resource.RLIM_INFINITY:\n    resource.setrlimit(r, (resource.RLIM_INFINITY,) * 2); raised = True\n"
        "  except (ValueError, OSError): pass\n"
        f" if raised: return {WIN}\n while True: pass"
    ),
    "prctl_games": P + (
        "def status(k): return [l.split()[1] for l in open('/proc/self/status') if l.startswith(k + ':')][0]\n"
        "def f(x):\n libc.prctl(38, 0, 0, 0, 0); libc.prctl(4, 1, 0, 0, 0); libc.prctl(28, 0, 0, 0, 0)\n"
        " libc.prctl(47, 2, 21, 0, 0); libc.prctl(36, 1, 0, 0, 0)\n"
        f" if status('NoNewPrivs') != '1' or status('Seccomp') != '2': return {WIN}\n"
        f" if any(int(status(k), 16) for k in ('CapEff', 'CapPrm', 'CapBnd', 'CapAmb', 'CapInh')): return {WIN}\n"
        f" if any(libc.prctl(23, c, 0, 0, 0) == 1 for c in range(41)): return {WIN}\n"
        " if os.fork() == 0:\n  os.setsid(); time.sleep(1000)\n return 0"
    ),
    "kernel_attack_surface_calls": P + (
        "def f(x):\n calls = [(250, 0, 0), (248, 0, 0), (321, 0, 0), (298, 0, 0), (425, 1, 0), (323, 0, 0),"
        " (304, 0, 0), (430, 0, 0), (246, 0, 0), (175, 0, 0), (169, 0, 0), (103, 3, 0)]\n"
        f" for nr, a, b in calls:\n  if libc.syscall(nr, a, b, 0, 0, 0) >= 0: return {WIN}\n return 0"
    ),
    "write_and_mknod_outside_the_work_dir": P + (
        "def f(x):\n for p in ('/', '/usr', '/usr/lib', '/dev', '/proc', '/proc/sys/kernel', '/bin'):\n"
        f"  try: open(os.path.join(p, 'hostile'), 'w').write('x'); return {WIN}\n  except OSError: pass\n"
        " try:\n  os.mknod('/tmp/mem', 0o20666, os.makedev(1, 1))\n"
        f"  os.open('/tmp/mem', os.O_RDONLY); return {WIN}\n except OSError: pass\n"
        f" try: open('/proc/sys/kernel/hostname', 'w').write('x'); return {WIN}\n except OSError: pass\n return 0"
    ),
}


@pytest.fixture(scope="module", autouse=True)
def planted_rows():
    """World-readable dataset rows holding the expected value, wherever this user can write
    (an outer root run has planted the rest for an ordinary user's run)."""
    made = []
    for d in PLANT_DIRS:
        path = Path(d) / PLANT_NAME
        try:
            if os.path.isdir(d) and not path.exists():
                path.write_text(PLANT_ROW)
                path.chmod(0o644)
                made.append(path)
        except OSError:
            pass  # not ours to write (or even to look into)
    yield [p for d in PLANT_DIRS if os.access(p := Path(d) / PLANT_NAME, os.R_OK)]
    for path in made:
        path.unlink(missing_ok=True)


def test_rows_are_planted_where_model_code_would_look(planted_rows):
    # the tmp dirs are writable for anyone, so the read cases always have bait to find
    assert {str(p.parent) for p in planted_rows} >= {"/tmp", "/var/tmp"}


@pytest.mark.parametrize("name", sorted(CASES))
def test_attack_on_the_seal_gets_no_pass_and_leaves_no_trace(executor, listener, name):
    assert_no_pass_and_no_trace(executor, CASES[name], listener[1])


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_seal_attack_is_valid_python(name):
    compile(CASES[name], name, "exec")


def test_the_attacks_win_on_the_host_where_nothing_seals_them(tmp_path, planted_rows):
    # the same programs, run unsandboxed, do find the answer: the cases can fail
    scope: dict = {}
    exec(compile(CASES["read_planted_dataset_rows"], "case", "exec"), scope)
    assert scope["f"](1) == 7919
    exec(compile(CASES["read_repo_venv_and_shared"], "case", "exec"), scope)
    assert scope["f"](1) == 7919


def test_a_job_cannot_read_a_concurrent_jobs_work_dir_or_proc(executor):
    writer = ExecJob(
        code="import time\ndef f(x):\n open('answer', 'w').write('7919')\n time.sleep(1.5)\n return 0",
        tests=TESTS,
    )
    reader = ExecJob(
        code=P + (
            "import glob\ndef f(x):\n end = time.monotonic() + 1.5\n while time.monotonic() < end:\n"
            "  for p in glob.glob('/proc/[0-9]*/cwd/answer') + glob.glob('/proc/[0-9]*/root/tmp/codeloop-work/*/answer')"
            " + glob.glob('/tmp/codeloop-work/*/answer') + glob.glob('/tmp/*/answer'):\n"
            "   try: return int(open(p).read())\n   except (OSError, ValueError): pass\n"
            "  time.sleep(0.01)\n return 0"
        ),
        tests=TESTS,
    )
    executor_2 = type(executor)(executor.cfg.model_copy(update={"workers": 2}))
    try:
        results = executor_2.run_many([writer, reader, writer, reader])
    finally:
        executor_2.close()
    assert [r.passed for r in results] == [False] * 4, [r.status for r in results]


def test_the_executor_reports_the_full_seal_for_this_user(executor):
    iso = executor.isolation
    assert iso.missing(FULL_SEAL) == [], iso
    if iso.backend == "local":  # root drops to a leased uid; a user gets a user namespace
        assert (iso.user_ns, iso.uid != 0) == (os.geteuid() != 0, os.geteuid() == 0), iso
