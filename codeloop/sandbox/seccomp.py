"""A seccomp filter that keeps model code from undoing the seal (stdlib only, zygote source).

Installed once in the zygote after its private root is built; every job's child inherits it
and cannot remove it. It answers EPERM for the calls that change what a process can see or
reach: mounts of any kind, pivot_root/chroot, new namespaces (unshare, setns, and clone with
a CLONE_NEW* flag), ptrace and cross-process memory access, kernel keyrings, bpf,
perf_event_open, io_uring (its operations bypass seccomp), handle-based opens, module and
kexec loading, and clock/host settings. clone3 answers ENOSYS (its flags sit behind a
pointer a filter cannot read), so glibc falls back to clone, whose flags it can. A call
from another ABI (x32, or a foreign audit arch) kills the process. Everything else is
allowed: this filter seals, the rlimits and namespaces bound.
"""

import ctypes
import errno
import os

AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
# syscall numbers: x86_64 from arch/x86/entry/syscalls/syscall_64.tbl, aarch64 from
# include/uapi/asm-generic/unistd.h (the numbers from 424 up are the same on both)
_COMMON = {"io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
           "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431,
           "fsmount": 432, "fspick": 433, "pidfd_getfd": 438, "mount_setattr": 442}
BLOCKED = {
    "x86_64": {"mount": 165, "umount2": 166, "pivot_root": 155, "chroot": 161, "unshare": 272,
               "setns": 308, "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311,
               "bpf": 321, "keyctl": 250, "add_key": 248, "request_key": 249,
               "perf_event_open": 298, "open_by_handle_at": 304, "name_to_handle_at": 303,
               "kexec_load": 246, "kexec_file_load": 320, "init_module": 175,
               "finit_module": 313, "delete_module": 176, "swapon": 167, "swapoff": 168,
               "reboot": 169, "acct": 163, "userfaultfd": 323, "iopl": 172, "ioperm": 173,
               "kcmp": 312, "syslog": 103, "vhangup": 153, "quotactl": 179,
               "settimeofday": 164, "clock_settime": 227, "adjtimex": 159,
               "clock_adjtime": 305, "sethostname": 170, "setdomainname": 171,
               "lookup_dcookie": 212, "uselib": 134, **_COMMON},
    "aarch64": {"mount": 40, "umount2": 39, "pivot_root": 41, "chroot": 51, "unshare": 97,
                "setns": 268, "ptrace": 117, "process_vm_readv": 270, "process_vm_writev": 271,
                "bpf": 280, "keyctl": 219, "add_key": 217, "request_key": 218,
                "perf_event_open": 241, "open_by_handle_at": 265, "name_to_handle_at": 264,
                "kexec_load": 104, "kexec_file_load": 294, "init_module": 105,
                "finit_module": 273, "delete_module": 106, "swapon": 224, "swapoff": 225,
                "reboot": 142, "acct": 89, "userfaultfd": 282, "kcmp": 272, "syslog": 116,
                "vhangup": 58, "quotactl": 60, "settimeofday": 170, "clock_settime": 112,
                "adjtimex": 171, "clock_adjtime": 266, "sethostname": 161,
                "setdomainname": 162, "lookup_dcookie": 18, **_COMMON},
}
CLONE = {"x86_64": 56, "aarch64": 220}
CLONE3 = 435
X32_BIT = 0x40000000  # x86_64: syscalls of the x32 ABI have this bit set
# CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET
CLONE_NEW_ANY = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000
CLONE_NEW_ANY |= 0x40000000

_LD_W_ABS, _JEQ, _JGE, _JSET, _RET = 0x20, 0x15, 0x35, 0x45, 0x06
RET_KILL_PROCESS, RET_ERRNO, RET_ALLOW = 0x80000000, 0x00050000, 0x7FFF0000
PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 22, 2


class _Insn(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8),
                ("k", ctypes.c_uint32)]


class _Prog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_uint16), ("filter", ctypes.POINTER(_Insn))]


def filter_program(arch):
    """The BPF program for ``arch`` as (code, jt, jf, k) tuples, jumps resolved."""
    if arch not in BLOCKED:
        raise OSError(errno.ENOSYS, f"no seccomp syscall table for {arch}")
    prog = [(_LD_W_ABS, 0, 0, 4), (_JEQ, 1, 0, AUDIT_ARCH[arch]), (_RET, 0, 0, RET_KILL_PROCESS)]
    prog.append((_LD_W_ABS, 0, 0, 0))  # the syscall number
    if arch == "x86_64":
        prog.append((_JGE, "kill", 0, X32_BIT))
    for nr in sorted(set(BLOCKED[arch].values())):
        prog.append((_JEQ, "eperm", 0, nr))
    prog.append((_JEQ, "enosys", 0, CLONE3))
    prog.append((_JEQ, 0, "allow", CLONE[arch]))
    prog.append((_LD_W_ABS, 0, 0, 16))  # clone's flags: args[0], low 32 bits
    prog.append((_JSET, "eperm", "allow", CLONE_NEW_ANY))
    labels = {"allow": len(prog), "eperm": len(prog) + 1, "enosys": len(prog) + 2,
              "kill": len(prog) + 3}
    prog += [(_RET, 0, 0, RET_ALLOW), (_RET, 0, 0, RET_ERRNO | errno.EPERM),
             (_RET, 0, 0, RET_ERRNO | errno.ENOSYS), (_RET, 0, 0, RET_KILL_PROCESS)]
    out = []
    for i, (code, jt, jf, k) in enumerate(prog):
        jt = labels[jt] - i - 1 if isinstance(jt, str) else jt
        jf = labels[jf] - i - 1 if isinstance(jf, str) else jf
        out.append((code, jt, jf, k))
    return out


def prepared_filter(libc):
    """``install_filter`` with the program built now: the returned function only installs
    it (per job, in a forked child, where building it would dirty pages each time)."""
    prog = filter_program(os.uname().machine)
    insns = (_Insn * len(prog))(*[_Insn(*x) for x in prog])
    fprog = _Prog(len(prog), insns)
    ref = ctypes.byref(fprog)

    def install():
        if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ref, 0, 0) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"seccomp filter refused: {os.strerror(err)}")

    install.keep = (insns, fprog)  # alive as long as the function
    return install


def install_filter(libc):
    """Install the filter on this process (and so on every child forked after). Needs
    no_new_privs or CAP_SYS_ADMIN; raises OSError where the kernel or arch refuses."""
    prog = filter_program(os.uname().machine)
    insns = (_Insn * len(prog))(*[_Insn(*x) for x in prog])
    fprog = _Prog(len(prog), insns)
    if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"seccomp filter refused: {os.strerror(err)}")
