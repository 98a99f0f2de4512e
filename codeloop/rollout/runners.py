"""Fan work out over a task runner chosen in params (`runner.*`): threads, Dask or Ray.

Rollout and score split their tasks into chunks and call ``fan_out(fn, chunks, cfg)``;
results come back in chunk order whatever the engine, so a Dask or Ray run produces the
same rows, in the same order, as the threaded one. ``fn`` must be a top-level function
(picklable by reference) and each chunk plain data: Dask and Ray ship them to other
processes or machines, so a chunk's paths are made ``absolute`` before it leaves.

- threads (default): a ThreadPoolExecutor in this process; right when the work is
  subprocess-bound (the sandbox) or releases the GIL (torch).
- dask: ``runner.address`` names an existing scheduler (``tcp://host:8786``); empty
  starts a LocalCluster of ``runner.workers`` worker *processes* (one thread each) for
  the duration of the call.
- ray: ``runner.address`` names an existing cluster (``host:6379`` or ``ray://host:10001``),
  used as is and left running; empty starts a local Ray of ``runner.workers`` CPUs for the
  duration of the call (never a cluster some other ``ray start`` left on this machine). A
  driver already connected (``ray.init`` by the caller) is used as it is and stays
  connected. Ray is an optional dependency, imported only when chosen.

Each chunk's function opens what it needs (policy, sandbox executor) in the process it
runs in: nothing live crosses to a worker, only the chunk's plain data.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, TypeVar

from codeloop.config import RunnerConfig

if TYPE_CHECKING:
    from distributed import Client

T = TypeVar("T")
R = TypeVar("R")


class RunnerError(RuntimeError):
    """The runner itself failed (engine missing, scheduler unreachable): infrastructure."""


def absolute(path: str | os.PathLike) -> str:
    """The path as this process resolves it ('' stays ''): a chunk's paths are opened by a
    worker whose working dir is its own (a Ray node's is where ``ray start`` ran)."""
    return os.path.abspath(path) if str(path) else ""


def chunked(items: Sequence[T], n_chunks: int) -> list[list[T]]:
    """Split items into at most n_chunks contiguous, near-equal chunks (order kept)."""
    items = list(items)
    n = max(1, min(n_chunks, len(items)))
    size, extra = divmod(len(items), n)
    out, start = [], 0
    for i in range(n):
        stop = start + size + (1 if i < extra else 0)
        out.append(items[start:stop])
        start = stop
    return [c for c in out if c] if items else []


def fan_out(fn: Callable[[Any], R], chunks: list, cfg: RunnerConfig | None = None) -> list[R]:
    """Apply fn to every chunk on the configured runner; results in input order.

    An exception raised by fn propagates unchanged (after the other chunks are
    abandoned): errors of the work are the caller's to classify, never swallowed here.
    """
    cfg = cfg or RunnerConfig()
    if not chunks:
        return []
    if cfg.kind == "threads":
        return _threads(fn, chunks, cfg)
    if cfg.kind == "dask":
        return _dask(fn, chunks, cfg)
    if cfg.kind == "ray":
        return _ray(fn, chunks, cfg)
    raise RunnerError(f"runner.kind: unknown runner {cfg.kind!r}; allowed: threads, dask, ray")


def _threads(fn: Callable[[Any], R], chunks: list, cfg: RunnerConfig) -> list[R]:
    if cfg.workers == 1 or len(chunks) == 1:
        return [fn(c) for c in chunks]  # no pool: clearer tracebacks, no thread overhead
    with ThreadPoolExecutor(max_workers=min(cfg.workers, len(chunks))) as pool:
        return list(pool.map(fn, chunks))


def _dask(fn: Callable[[Any], R], chunks: list, cfg: RunnerConfig) -> list[R]:
    try:
        from distributed import Client, LocalCluster
    except ImportError as exc:  # pragma: no cover - distributed is a core dependency
        raise RunnerError("runner.kind=dask needs the 'distributed' package") from exc
    if cfg.address:
        try:
            client = Client(cfg.address, timeout="5s")
        except OSError as exc:
            raise RunnerError(f"runner.address: no Dask scheduler at {cfg.address}") from exc
        with client:
            return _dask_map(client, fn, chunks)
    # Processes, not threads: that is the point of choosing Dask on one machine (GIL-bound
    # tokenisation and reward code). No dashboard: nothing here should open a web port.
    with (
        LocalCluster(
            n_workers=cfg.workers,
            threads_per_worker=1,
            processes=True,
            dashboard_address=None,
        ) as cluster,
        Client(cluster) as client,
    ):
        return _dask_map(client, fn, chunks)


def _dask_map(client: Client, fn: Callable[[Any], R], chunks: list) -> list[R]:
    # pure=False: two equal chunks are still two pieces of work (sampling is seeded
    # per chunk by the caller, but equality must never merge them silently).
    futures = client.map(fn, chunks, pure=False)
    return client.gather(futures)


def _ray(fn: Callable[[Any], R], chunks: list, cfg: RunnerConfig) -> list[R]:
    try:
        import ray
    except ImportError as exc:
        raise RunnerError(
            "runner.kind=ray needs Ray installed (pip install 'ray[default]')"
        ) from exc
    if ray.is_initialized():  # the caller's own connection: theirs to keep
        return _ray_map(ray, fn, chunks)
    _ray_connect(ray, cfg)
    try:
        return _ray_map(ray, fn, chunks)
    finally:
        ray.shutdown()  # disconnects this driver; a cluster at runner.address keeps running


def _ray_connect(ray, cfg: RunnerConfig) -> None:
    """Connect to the cluster at runner.address, or start a local one of runner.workers CPUs."""
    if cfg.address:
        _probe(cfg.address)
        try:
            ray.init(address=cfg.address, log_to_driver=False, runtime_env=_worker_env())
        except (ConnectionError, RuntimeError) as exc:  # not Ray there, or its auth refused us
            raise RunnerError(
                f"runner.address: cannot join the Ray cluster at {cfg.address} ({exc}); a "
                "cluster with token auth needs RAY_AUTH_MODE=token and its token on this side"
            ) from exc
        return
    # "local": a new Ray, never one a stray `ray start` left on this machine. No dashboard
    # (nothing here should open a web port) and no usage report unless the user asked.
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    ray.init(
        address="local",
        num_cpus=cfg.workers,
        include_dashboard=False,
        log_to_driver=False,
        runtime_env=_worker_env(),
    )


def _worker_env() -> dict | None:
    """This process's CODELOOP_* settings for every worker of the job: a cluster's workers
    inherit the environment of whoever started the node, not this driver's, and torch's
    thread count (CODELOOP_THREADS) or the sandbox's interpreter and image must match."""
    env = {k: v for k, v in os.environ.items() if k.startswith("CODELOOP_")}
    return {"env_vars": env} if env else None


def _probe(address: str, timeout_s: float = 5.0) -> None:
    """RunnerError unless something listens at address's host:port: ray.init would retry
    an unreachable address for minutes before giving up."""
    hostport = address.removeprefix("ray://")
    host, sep, port = hostport.rpartition(":")
    if not sep or not port.isdigit():
        return  # "auto" and the like: Ray resolves them and fails fast when it cannot
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as exc:
        raise RunnerError(f"runner.address: no Ray cluster at {address} ({exc})") from exc


def _ray_map(ray, fn: Callable[[Any], R], chunks: list) -> list[R]:
    remote = ray.remote(fn)
    try:
        return ray.get([remote.remote(c) for c in chunks])
    except ray.exceptions.RayTaskError as exc:
        # The work's own error, as the other runners raise it (Ray wraps it in its own
        # class); the remote traceback stays readable as its cause.
        if isinstance(exc.cause, BaseException):
            raise exc.cause from exc
        raise
    except ray.exceptions.RayError as exc:  # a worker or node died, an object was lost
        raise RunnerError(f"runner.kind=ray: {exc}") from exc
