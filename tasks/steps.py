"""Run a stage's steps as Prefect tasks: ``codeloop.stages.<stage>.run(..., step=as_task)``.

Each step becomes a task named like its function (so the UI names what the code names),
with the options below (retries only where a failure can be transient; nothing is
cached: steps read and write files). After some steps an artifact task publishes what
the step returned, keyed by the step's function name. ``stage_logs`` forwards the
library's ``codeloop.*`` log records into the current Prefect run's log.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from prefect import task
from prefect.cache_policies import NONE
from prefect.logging import get_run_logger

from tasks.artifacts import (
    publish_agent_artifacts,
    publish_components,
    publish_data_report,
    publish_engine_rollout,
    publish_engine_train,
    publish_eval_artifacts,
    publish_gate_artifacts,
    publish_test_quality,
)

# Retries where a failure can be transient (the sandbox pool on a loaded machine); bad
# input rows are quarantined by the library and never retried; training and evaluation
# are deterministic for their inputs, so a retry would only repeat the failure.
OPTIONS: dict[str, dict[str, Any]] = {
    "clean_tasks": {"retries": 1, "retry_delay_seconds": 2},
}

# step function name -> publish(result): artifacts shown on the Artifacts page.
ARTIFACTS: dict[str, Callable[[Any], None]] = {
    "write_clean": lambda r: (publish_data_report(r), publish_test_quality(r)),
    "summarize": publish_components,
    "agent_summary": publish_agent_artifacts,
    "engine_metrics": publish_engine_rollout,  # called only when an engine sampled
    "train_grpo": lambda r: publish_engine_train(r) if r.get("engine_rows") else None,
    "gate": lambda r: publish_gate_artifacts(r["decision"], r["alarms"]),
    "write_eval": lambda r: (
        publish_eval_artifacts(r["result"], r["trend"], r["data_report"], r["score"]),
        [publish_agent_artifacts(s, prefix="agent-eval") for s in r.get("agent", {}).values()],
    ),
}


def as_task(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Run ``fn(*args, **kwargs)`` as a Prefect task named ``fn.__name__``."""
    name = fn.__name__
    result = task(fn, name=name, cache_policy=NONE, **OPTIONS.get(name, {}))(*args, **kwargs)
    if name in ARTIFACTS:
        ARTIFACTS[name](result)
    return result


class _RunLogHandler(logging.Handler):
    """Re-emit a record on the Prefect run logger of the flow or task running now."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            get_run_logger().log(record.levelno, "%s", record.getMessage())
        except Exception:  # outside a run context (a runner thread): stderr instead
            logging.lastResort.handle(record)


@contextmanager
def stage_logs() -> Iterator[None]:
    """Within the block, ``codeloop.*`` INFO records land in the Prefect run log."""
    lib = logging.getLogger("codeloop")
    handler, level = _RunLogHandler(), lib.level
    lib.addHandler(handler)
    lib.setLevel(logging.INFO)
    try:
        yield
    finally:
        lib.removeHandler(handler)
        lib.setLevel(level)
