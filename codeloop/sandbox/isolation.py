"""What a sandbox really achieved (``executor.isolation``), and the check against a requirement.

Every zygote probes itself at start (codeloop.sandbox.seal.probe_child: a throw-away child
put through the per-job seal reports its uid, capability sets, no_new_privs, seccomp mode,
which forbidden calls were refused, its root, which host paths it can see and which
cgroups it is in) and compares its namespaces with the parent's. ``Isolation.from_zygote``
turns that report into a record; ``missing`` names the properties of ``sandbox.require`` it
lacks (``OPTIONAL`` ones are not in the default requirement).
"""

from __future__ import annotations

import os
import sys
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path

# Every property a sandbox can be required to have; the default requirement is all of them.
PROPERTIES = {
    "pid_ns": "own PID namespace (sees and signals only its own processes)",
    "net_ns": "own network namespace with no interface but loopback",
    "ipc_ns": "own IPC namespace",
    "mount_ns": "own mount namespace",
    "private_root": "a private root: no host path outside the runtime and ro_binds is visible",
    "read_only_root": "the root itself cannot be written",
    "caps_dropped": "no capability in any set (effective, permitted, inheritable, bounding, ambient)",
    "no_new_privs": "no_new_privs set (exec cannot gain privileges)",
    "seccomp": "seccomp filter refusing mount, unshare, setns, ptrace, bpf, keyctl, ...",
    "rlimits": "CPU, memory, file size, fd and process rlimits applied",
    "not_host_root": "model code does not run as the host's root",
    "job_memory_cgroup": "every process of a job in one memory cgroup limited to the job's"
    " budget (needs a writable memory cgroup: root, or a delegated one)",
}
# what a sandbox may lack and still run under the default requirement: the host decides it
# (an ordinary user without a delegated cgroup has none), not the seal
OPTIONAL = ("job_memory_cgroup",)
FULL_SEAL = tuple(p for p in PROPERTIES if p not in OPTIONAL)
NS_NAMES = ("pid", "net", "ipc", "uts", "mnt", "user")


def host_namespaces() -> dict[str, int]:
    """This process's namespace inodes; a zygote compares its own against them."""
    return {n: os.stat(f"/proc/self/ns/{n}").st_ino for n in NS_NAMES}


@lru_cache(maxsize=1)
def host_paths_to_hide() -> tuple[str, ...]:
    """Host paths no sandbox may show: the repo, ../shared, the venv, and a world-readable
    canary file in the host's /tmp and /var/tmp (one per uid, kept: a probe needs it to
    exist whenever a zygote starts, and a killed process could not remove it anyway)."""
    repo = Path(__file__).resolve().parents[2]
    paths = [sys.prefix]
    if (repo / "pyproject.toml").exists():  # a checkout (not an installed package's dir)
        paths += [str(repo), str(repo.parent / "shared")]
    for d in ("/tmp", "/var/tmp"):
        path = os.path.join(d, f"codeloop-canary-{os.getuid()}")
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o644))
        except OSError:
            pass  # someone else's file or link of that name: it is a host path all the same
        if os.path.lexists(path):
            paths.append(path)
    return tuple(p for p in paths if p not in ("/", "/usr"))


@dataclass(frozen=True)
class Isolation:
    """What the sandbox's children really got, probed from inside (see module doc)."""

    backend: str
    pid_ns: bool = False
    net_ns: bool = False
    ipc_ns: bool = False
    uts_ns: bool = False
    mount_ns: bool = False
    user_ns: bool = False
    private_root: bool = False
    read_only_root: bool = False
    uid: int | None = None  # the uid model code runs as (inside its user namespace)
    host_uid: int | None = None  # the same uid as the host sees it
    caps_dropped: bool = False
    no_new_privs: bool = False
    seccomp: bool = False
    rlimits: bool = False
    job_memory_cgroup: bool = False
    root_entries: tuple[str, ...] = ()
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def not_host_root(self) -> bool:
        return self.host_uid is not None and self.host_uid != 0

    def has(self, prop: str) -> bool:
        return bool(getattr(self, prop))

    def missing(self, require: list[str] | tuple[str, ...]) -> list[str]:
        """The required properties this sandbox lacks (empty: it meets ``require``)."""
        return [p for p in require if not self.has(p)]

    def as_dict(self) -> dict:
        return {**asdict(self), "not_host_root": self.not_host_root}

    def summary(self) -> str:
        held = [p for p in PROPERTIES if self.has(p)]
        who = f"uid {self.uid}" + (" in a user namespace" if self.user_ns else "")
        return f"{self.backend}: {', '.join(held) or 'nothing'}; model code as {who}"

    @classmethod
    def from_zygote(cls, backend: str, info: dict) -> Isolation:
        """The record from a zygote's start report."""
        probe, ns = info.get("probe") or {}, info.get("namespaces") or {}
        notes = [f"{k}: {v}" for k, v in (info.get("lock_down_failed") or {}).items()]
        if "error" in probe:
            notes.append(f"probe failed: {probe['error']}")
        caps = probe.get("caps") or {}
        visible = probe.get("host_paths_visible", ["(no probe)"])
        if visible:
            notes.append(f"host paths visible: {visible}")
        cgroup = info.get("job_cgroup") or {}
        if cgroup.get("error"):
            notes.append(f"job_memory_cgroup: {cgroup['error']}")
        built = info.get("root_built")
        same_root = built is None or sorted(probe.get("root_entries", [])) == sorted(built)
        return cls(
            backend=backend,
            pid_ns=bool(ns.get("pid")) and bool(info.get("pid1")),
            net_ns=bool(ns.get("net")) and set(probe.get("interfaces", ["?"])) <= {"lo"},
            ipc_ns=bool(ns.get("ipc")),
            uts_ns=bool(ns.get("uts")),
            mount_ns=bool(ns.get("mnt")),
            user_ns=bool(ns.get("user")),
            private_root=bool(ns.get("mnt")) and not visible and same_root,
            read_only_root=probe.get("root_writable") is False,
            uid=probe.get("uid"),
            host_uid=_host_uid(probe.get("uid"), info.get("uid_map", "")),
            caps_dropped=bool(caps) and not any(caps.values()),
            no_new_privs=bool(probe.get("no_new_privs")),
            seccomp=probe.get("seccomp_mode") == 2
            and all(probe.get(k) for k in ("ptrace_refused", "unshare_refused", "umount_refused")),
            rlimits=bool(probe.get("rlimits")),
            job_memory_cgroup=_in_cgroup(probe.get("cgroup", ""), cgroup),
            root_entries=tuple(probe.get("root_entries", ())),
            notes=tuple(notes),
        )


def _in_cgroup(lines: str, cgroup: dict) -> bool:
    """Whether the probe child's /proc/self/cgroup puts it in the zygote's job cgroup."""
    path, kind = cgroup.get("path"), cgroup.get("kind")
    if not path:
        return False
    for line in lines.splitlines():
        _, controllers, where = line.split(":", 2)
        ours = controllers == "" if kind == "v2" else "memory" in controllers.split(",")
        if ours and where.endswith("/" + path):
            return True
    return False


def _host_uid(uid: int | None, uid_map: str) -> int | None:
    """``uid`` (inside the zygote's user namespace) as the host sees it, via its uid_map."""
    if uid is None:
        return None
    for line in uid_map.splitlines():
        inside, outside, count = (int(x) for x in line.split())
        if inside <= uid < inside + count:
            return outside + uid - inside
    return None  # unmapped: the kernel shows it as the overflow uid; we cannot vouch for it


def refusal(backend: str, isolation: Isolation, missing: list[str]) -> str:
    """The message a refused sandbox raises: what is missing and what to do."""
    lines = [f"- {p}: {PROPERTIES[p]}" for p in missing]
    extra = f" ({'; '.join(isolation.notes)})" if isolation.notes else ""
    hint = (
        "use sandbox.backend: docker (needs a Docker engine and scripts/build_sandbox_image.sh)"
        if backend != "docker"
        else "check the Docker engine's seccomp/cap support"
    )
    return (
        f"the {backend} sandbox lacks what sandbox.require asks{extra}:\n"
        + "\n".join(lines)
        + f"\n{hint}, or drop these from sandbox.require knowingly"
    )
