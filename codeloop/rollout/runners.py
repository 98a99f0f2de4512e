"""Fan work out over a task runner chosen in params (`runner.*`): threads, Dask or Ray.

Rollout and score split their tasks into chunks and call ``fan_out(fn, chunks, cfg)``;
results come back in chunk order whatever the engine, so a Dask or Ray run produces the
same rows, in the same order, as the threaded one. ``fn`` must be a top-level function
(picklable by reference) and each chunk plain data: Dask and Ray ship them to other
processes or machines.

- threads (default): a ThreadPoolExecutor in this process; right when the work is
  subprocess-bound (the sandbox) or releases the GIL (torch).
- dask: ``runner.address`` names an existing scheduler (``tcp://host:8786``); empty
  starts a LocalCluster of ``runner.workers`` worker *processes* (one thread each) for
  the duration of the call.
- ray: ``runner.address`` is passed to ``ray.init`` (empty: a local Ray); Ray is an
  optional dependency, imported only when chosen.
"""

from __future__ import annotations

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
    started = False
    if not ray.is_initialized():
        ray.init(address=cfg.address or None, ignore_reinit_error=True, log_to_driver=False)
        started = True
    try:
        remote = ray.remote(fn)
        return ray.get([remote.remote(c) for c in chunks])
    finally:
        if started and not cfg.address:
            ray.shutdown()
