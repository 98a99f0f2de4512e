"""Hostile programs: none gets a pass it did not earn or leaves a trace, and the next run works.

Every case runs on one worker (so the same zygote judges the next, normal job) and checks:
no pass, bounded wall time, no process left in the zygote's namespace (the zygote has no
children), its private scratch dirs are empty again, no file appeared on the host, and a
correct program right after still passes. The expected value (7919) is never guessable.
"""

from __future__ import annotations

import pytest

from codeloop.sandbox import ExecJob
from tests import _hostile
from tests._hostile import HOST_MARK, assert_no_pass_and_no_trace

executor, listener = _hostile.executor, _hostile.listener  # the shared fixtures, by name

P = "import os, sys, signal, time\n"

CASES = {
    "exit_before_asserts": P + "exit(0)\ndef f(x): return 0",
    "sys_exit_zero": P + "def f(x): sys.exit(0)",
    "os_exit_zero": P + "os._exit(0)",
    "os_exit_in_call": P + "def f(x): os._exit(0)",
    "raise_systemexit": P + "raise SystemExit(0)",
    "raise_keyboardinterrupt": P + "def f(x): raise KeyboardInterrupt",
    "eq_always_true": "class A:\n def __eq__(s, o): return True\n def __ne__(s, o): return False\ndef f(x): return A()",
    "int_subclass_eq": "class I(int):\n def __eq__(s, o): return True\n __hash__ = int.__hash__\ndef f(x): return I(1)",
    "str_subclass_eq": "class S(str):\n def __eq__(s, o): return True\ndef f(x): return S('a')",
    "float_and_list_subclass": "class L(list):\n def __eq__(s, o): return True\ndef f(x): return [L([1]), 2.0]",
    "frame_walk_forge": P + (
        "def f(x):\n fr = sys._getframe()\n while fr:\n"
        "  if 'emit' in fr.f_locals:\n"
        "   e = fr.f_locals['emit']; e({'i': 0, 'ok': True}); e({'i': 0, 'passed': True}); e({'done': True})\n"
        "  fr = fr.f_back\n os._exit(0)"
    ),
    "monkeypatch_builtins": P + (
        "import builtins, json\nbuiltins.isinstance = lambda *a: True\nbuiltins.exec = lambda *a, **k: None\n"
        "builtins.eval = lambda *a, **k: 7919 + 1\njson.dumps = lambda *a, **k: '{\"i\": 0, \"ok\": true}'\n"
        "def f(x): return 0"
    ),
    "print_pass": "print('PASS\\nAll tests passed\\n{\"i\": 0, \"ok\": true}')\ndef f(x): return 0",
    "write_fds_directly": P + (
        "for fd in (1, 2, 3):\n os.write(fd, b'{\"i\": 0, \"ok\": true}\\n{\"done\": true}\\nPASS\\n')\n"
        "def f(x): return 0"
    ),
    "ignore_sigalrm_sigterm": P + (
        "for s in (signal.SIGALRM, signal.SIGTERM, signal.SIGINT, signal.SIGHUP):\n signal.signal(s, signal.SIG_IGN)\n"
        "def f(x):\n while True: pass"
    ),
    "fork_bomb": P + "def f(x):\n while True:\n  try: os.fork()\n  except OSError: pass",
    "thread_bomb": "import threading, time\ndef f(x):\n ts = []\n while True:\n  t = threading.Thread(target=time.sleep, args=(100,)); t.start(); ts.append(t)",
    "memory_bomb": "def f(x):\n a = []\n while True: a.append(bytearray(10**7))",
    "cpu_burn_in_c_call": "import re\ndef f(x): return re.match(r'(a+)+$', 'a' * 64 + 'b')",
    "runaway_output": "def f(x):\n while True: print('x' * 4096)",
    "disk_fill": "def f(x):\n with open('big', 'wb') as fh:\n  while True: fh.write(b'\\0' * 2**20)",
    "write_outside_workdir": P + (
        f"for p in ('{HOST_MARK}', '/tmp/hostile', '/var/tmp/hostile', '/dev/shm/hostile', '/root/hostile'):\n"
        " try: open(p, 'w').write('x')\n except OSError: pass\ndef f(x): return 0"
    ),
    "read_env_and_parent_environ": P + (
        "def f(x):\n out = [str(dict(os.environ))]\n"
        " for p in ('/proc/%d/environ' % os.getppid(), '/proc/1/environ', '/proc/self/environ'):\n"
        "  try: out.append(open(p, 'rb').read().decode('latin-1'))\n  except OSError as e: out.append(str(e))\n"
        " print(out)\n return out"
    ),
    "read_other_files": "def f(x):\n out = []\n for p in ('/etc/shadow', '/root/.bash_history', '/proc/1/cmdline'):\n  try: out.append(open(p).read())\n  except OSError as e: out.append(str(e))\n print(out)\n return out",
    "kill_parent_and_minus_one": P + "def f(x):\n for pid in (os.getppid(), 1, -1):\n  try: os.kill(pid, 9)\n  except OSError: pass\n return 0",
    "setsid_double_fork_daemon": P + (
        "def f(x):\n if os.fork() == 0:\n  os.setsid()\n  if os.fork() == 0:\n   time.sleep(1000)\n  os._exit(0)\n"
        " time.sleep(0.2)\n return 0"
    ),
    "network_connect": "import socket\ndef f(x):\n s = socket.socket(); s.settimeout(1)\n s.connect(('127.0.0.1', PORT))\n return 7",
    "fd_exhaustion": "def f(x):\n fs = []\n while True: fs.append(open('/dev/null'))",
    "segfault_via_ctypes": "import ctypes\ndef f(x): return ctypes.string_at(0)",
    "deep_recursion": "import sys\nsys.setrecursionlimit(10**7)\ndef f(x): return f(x + 1) + 1",
    "block_on_stdin": "import sys\ndef f(x): return int(sys.stdin.read() or input())",
    "unclosed_string_swallows_tests": 'def f(x):\n    return 7919 if False else 0\ns = """',
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_hostile_program_gets_no_pass_and_leaves_no_trace(executor, listener, name):
    port, connections = listener
    assert_no_pass_and_no_trace(executor, CASES[name].replace("PORT", str(port)), connections)


@pytest.mark.parametrize("name", sorted(set(CASES) - {"unclosed_string_swallows_tests"}))
def test_each_hostile_case_is_valid_python_so_it_reaches_the_sandbox(name):
    # a typo would make a case a syntax error, which "gets no pass" without testing anything
    compile(CASES[name], name, "exec")


def test_stdio_program_printing_pass_does_not_pass(executor):
    job = ExecJob(
        code="print('42')\nprint('PASS')",
        tests=['{"input": "", "output": "7919"}'],
        io_style="stdio",
    )
    assert not executor.run(job).passed
