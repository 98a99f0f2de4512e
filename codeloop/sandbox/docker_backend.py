"""The ``docker`` backend: the same zygote, as PID 1 of a warm, locked-down container.

One container per worker slot, started once (``--network none``, memory / pids / CPU
limits, read-only root, tmpfs /tmp, uid 65534, all capabilities dropped,
no-new-privileges, Docker's default seccomp profile, ``sandbox.ro_binds`` as read-only
volumes) from the image ``scripts/build_sandbox_image.sh`` builds offline, or, for an
executor of one environment (``env_dir``), from that environment's image built on it
(codeloop.sandbox.env_images). A repository task's command runs in its environment's
own image: each environment named by a command gets a pool of containers of that image. The container's
root is the image: no host path exists inside. The zygote adds the same lock-down as the
local backend (our seccomp filter on top of Docker's, empty capability sets) and its
start-up probe must meet ``sandbox.require`` like every backend's.
Jobs go in and results come out over the container's attached stdin/stdout, so a run
does not pay a container start. Inside, the zygote forks one child per job and, as PID 1,
kill(-1)s everything the job left; it is non-dumpable, so a child of the same uid can
neither ptrace it nor open its /proc entries.

Memory: a container runs one job at a time, so its memory limit (the executor's
``memory_mb`` + 256 MiB, which also holds the zygote and what the job writes to the
container's /tmp; a job's own ``memory_mb`` does not change it) caps every process of a job
together. The zygote reads the container's own memory cgroup's OOM-kill count (memcg.py,
``watch``): any OOM kill in it during a job ends the job as memory_limit, also when the
killed process was not its first child. No cgroup is made per job (the container is one),
so ``job_memory_cgroup`` is not probed true here.
Workspaces with a quota (``workspace_bytes``): the host mounts each workspace's tmpfs below
the shared workspace root (cmdjobs.WorkspaceRoot), and the root's volume is ``rslave``, so
the container sees each one at /ws/<token> and a write past its size fails with ENOSPC.
"""

from __future__ import annotations

import json
import marshal
import os
import select
import socket
import struct
import threading
import time

from codeloop.config import SandboxConfig
from codeloop.sandbox.base import SandboxError
from codeloop.sandbox.cmdjobs import WorkspaceRoot
from codeloop.sandbox.pool import ZYGOTE_SRC, PoolExecutor, zygote_opts
from codeloop.sandbox.verdicts import wire

IMAGE = os.environ.get("CODELOOP_SANDBOX_IMAGE", "codeloop-sandbox:bookworm")
LABEL = "codeloop.sandbox"
CONTAINER_UID = 65534


def docker_client():
    """A connected docker SDK client, or SandboxError saying why there is none."""
    try:
        import docker

        client = docker.from_env(timeout=60)
        client.ping()
        return client
    except Exception as exc:  # noqa: BLE001 - any failure means "no engine here"
        raise SandboxError(f"docker engine not reachable: {exc}") from exc


def engine_problem(image: str = IMAGE) -> str:
    """Why the docker backend cannot run here ('' when it can)."""
    try:
        client = docker_client()
    except SandboxError as exc:
        return str(exc)
    try:
        client.images.get(image)
    except Exception:  # noqa: BLE001
        return f"image {image} missing: run scripts/build_sandbox_image.sh"
    finally:
        client.close()
    return ""


def skip_without_docker_engine() -> None:
    """For tests: skip (printing why) only when no docker engine answers; a missing image
    is a setup error and is left to fail loudly (run scripts/build_sandbox_image.sh)."""
    try:
        docker_client().close()
    except SandboxError as exc:
        import pytest

        print(f"docker tests skipped: {exc}")
        pytest.skip(f"no docker engine: {exc}")


class DockerZygote:
    """A zygote running as the main process of one container, spoken to over attach."""

    def __init__(
        self,
        client,
        cfg: SandboxConfig,
        slot: int,
        start_timeout: float = 60.0,
        binds=(),
        receive: bool = False,
        image: str = IMAGE,
    ) -> None:
        # receive: writable volumes get the host's later mounts below them (rslave; needs a
        # shared or slave source mount: a quota'd WorkspaceRoot's)
        rw = {"mode": "rw", **({"propagation": "rslave"} if receive else {})}
        opts = zygote_opts(None, "/tmp/codeloop-work", private_scratch=True, container=True,
                           nproc=4096, watch_parent=False, oom_fault=False,
                           cgroup={"watch": True})
        try:
            self.container = client.containers.create(
                image,
                command=["/usr/bin/python3", "-I", "-S", "-c", ZYGOTE_SRC, json.dumps(opts)],
                stdin_open=True, network_mode="none", read_only=True, user=f"{CONTAINER_UID}:{CONTAINER_UID}",
                tmpfs={"/tmp": "size=256m,mode=1777"}, mem_limit=f"{cfg.memory_mb + 256}m",
                memswap_limit=f"{cfg.memory_mb + 256}m", pids_limit=128, nano_cpus=1_000_000_000,
                cap_drop=["ALL"], security_opt=["no-new-privileges"], labels={LABEL: str(slot)},
                volumes={**{p: {"bind": p, "mode": "ro"} for p in cfg.ro_binds},
                         **{src: {"bind": dst, **(rw if writable else {"mode": "ro"})}
                            for src, dst, writable in binds}},
                environment={"LANG": "C.UTF-8"}, ipc_mode="private", name=None,
            )
            self.sock = client.api.attach_socket(
                self.container.id, params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1}
            )
            self.raw: socket.socket = getattr(self.sock, "_sock", self.sock)
            self.container.start()
        except Exception as exc:  # noqa: BLE001
            raise SandboxError(f"cannot start sandbox container from {image}: {exc}") from exc
        self.buf, self.err = b"", b""
        self.info = self._recv(start_timeout)

    def _fill(self, deadline: float) -> None:
        """Read one multiplexed frame (8-byte header) into stdout or stderr buffers."""
        head = self._raw_exact(8, deadline)
        kind, size = head[0], struct.unpack(">I", head[4:])[0]
        body = self._raw_exact(size, deadline)
        if kind == 1:
            self.buf += body
        else:
            self.err = (self.err + body)[-4000:]

    def _raw_exact(self, n: int, deadline: float) -> bytes:
        out = b""
        while len(out) < n:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([self.raw], [], [], remaining)[0]:
                raise SandboxError(f"sandbox container gave no answer in time{self._tail()}")
            chunk = self.raw.recv(n - len(out))
            if not chunk:
                raise SandboxError(f"sandbox container exited{self._tail()}")
            out += chunk
        return out

    def _tail(self) -> str:
        text = self.err.decode("utf-8", "replace").strip()
        return f": {text[-1500:]}" if text else ""

    def _recv(self, timeout: float) -> dict:
        deadline = time.monotonic() + timeout
        while len(self.buf) < 4:
            self._fill(deadline)
        size = struct.unpack(">I", self.buf[:4])[0]
        while len(self.buf) < 4 + size:
            self._fill(deadline)
        body, self.buf = self.buf[4 : 4 + size], self.buf[4 + size :]
        return marshal.loads(body)

    def host_pid(self) -> int:
        """Host PID of the container's zygote (its PID 1)."""
        self.container.reload()
        return int(self.container.attrs["State"]["Pid"])

    def send(self, job: dict) -> None:
        """Queue one job (see pool.Lane)."""
        try:
            self.raw.sendall(wire(job))
        except OSError as exc:
            raise SandboxError(f"sandbox container is gone: {exc}") from exc

    def recv(self, timeout: float) -> dict:
        """The answer to the oldest job not yet answered."""
        try:
            return self._recv(timeout)
        except (OSError, ValueError) as exc:  # closed under us by a lane-mate's discard
            raise SandboxError(f"sandbox container is gone: {exc}") from exc

    def request(self, job: dict, timeout: float) -> dict:
        self.send(job)
        return self.recv(timeout)

    def close(self) -> None:
        try:
            self.raw.close()
        except OSError:
            pass
        try:
            self.container.remove(force=True)
        except Exception:  # noqa: BLE001 - already gone
            pass


def _interpreter_problem(env_dir: str, have: str) -> str:
    """Why the env dir's spec (its spec.json) cannot run on an image's python ``have``
    ('' when it can, or when the dir has no spec: a ``--deps`` dir)."""
    try:
        with open(os.path.join(env_dir, "spec.json")) as f:
            need = json.load(f).get("python", "")
    except FileNotFoundError:
        return ""
    except (OSError, ValueError, AttributeError):
        return f"environment {os.path.basename(env_dir)[:16]}: unreadable spec.json"
    if need and need != have:
        return (f"environment {os.path.basename(env_dir)[:16]} needs python {need}; "
                f"its image has {have or 'an unknown python'}")
    return ""


class DockerExecutor(PoolExecutor):
    """``backend: docker``: a warm pool of containers, one zygote each."""

    def __init__(
        self,
        cfg: SandboxConfig,
        workspaces: bool = False,
        envs_root: str | None = None,
        ws_parent: str | None = None,
        warm: bool = False,
        workspace_bytes: int | None = None,
        env_dir: str | None = None,
    ) -> None:
        self.client = docker_client()
        problem = engine_problem()
        if problem:
            raise SandboxError(problem)
        # env_dir: every container runs from that environment's own image (env_images)
        self.image = IMAGE
        if env_dir:
            from codeloop.sandbox.env_images import env_image

            self.image = env_image(self.client, env_dir, IMAGE)
        # workspaces: a rw volume at /ws; the container's uid cannot take files over, so the
        # host hands each workspace to it before a command (WorkspaceRoot.hand_over)
        self.workspaces = None
        if workspaces:
            self.workspaces = WorkspaceRoot(
                envs_root, owner=CONTAINER_UID, parent=ws_parent, quota_bytes=workspace_bytes
            )
            if env_dir:
                from codeloop.sandbox.env_images import env_inside

                self.workspaces.baked[os.path.realpath(env_dir)] = env_inside(env_dir)
        binds = self.workspaces.binds() if self.workspaces else []
        receive = bool(self.workspaces and self.workspaces.quota_enforced)
        self._spawn_in = lambda image: lambda slot: DockerZygote(
            self.client, cfg, slot, binds=binds, receive=receive, image=image)
        # every other environment (an env dir with a spec.json under the envs root) gets an
        # image and a pool of containers of its own, on first use (env_pool)
        self._env_pools: dict[str, PoolExecutor] = {}
        self._env_tags: dict[str, str] = {}
        self._env_lock = threading.Lock()
        if self.workspaces is not None:
            self.workspaces.bake = self._bake
        super().__init__(cfg, self._spawn_in(self.image), drop_uid=False, backend="docker")
        self.start(all_slots=warm)
        have = self._zygote(0).info.get("python", "")
        problem = _interpreter_problem(env_dir, have) if env_dir else ""
        if problem:
            self.close()
            raise SandboxError(problem)

    def _bake(self, real: str) -> str | None:
        """The env dir's path in its own image (built once, with a pool of containers of
        its own), or None for a dir that is no environment's (pytest's, our plugin's)."""
        envs = self.workspaces.envs_root
        if not envs or os.path.dirname(real) != envs or not os.path.isfile(
                os.path.join(real, "spec.json")):
            return None
        from codeloop.sandbox.env_images import env_image, env_inside

        inside = env_inside(real)
        with self._env_lock:
            if inside not in self._env_pools:
                if self._closed:
                    raise SandboxError("executor is closed")
                tag = env_image(self.client, real, IMAGE)
                pool = PoolExecutor(self.cfg, self._spawn_in(tag), drop_uid=False,
                                    backend="docker")
                pool.start()  # slot 0 now: its interpreter must be the one the spec names
                problem = _interpreter_problem(real, pool._zygote(0).info.get("python", ""))
                if problem:
                    pool.close()
                    raise SandboxError(problem)
                self._env_tags[inside] = tag
                self._env_pools[inside] = pool
            self.workspaces.baked[real] = inside
        return inside

    def env_pool(self, image_env: str) -> PoolExecutor:
        """The pool whose containers run the environment an env dir path names (this
        executor's own for its own image's env or an unknown one)."""
        return self._env_pools.get(image_env, self)

    def env_images(self) -> dict[str, str]:
        """Env dir path inside -> image, of every environment given a pool of its own."""
        return dict(self._env_tags)

    def close(self) -> None:
        with self._env_lock:
            pools, self._env_pools = list(self._env_pools.values()), {}
        for pool in pools:
            pool.close()
        super().close()
        self.client.close()
