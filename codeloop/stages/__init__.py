"""One module per dvc stage, named like it, each with one entry point ``run(params, paths,
step=call) -> metrics`` holding the stage's whole orchestration.

``step(fn, *args, **kwargs)`` is how a stage invokes each of its steps: a plain call here
(tests, benchmarks, the CLI); ``flows/<stage>.py`` passes ``tasks.steps.as_task``, which
runs the same step as a Prefect task named like ``fn`` (retries, timeouts from
``tasks/steps.py``), so the UI shows the steps without a second copy of the orchestration.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Step = Callable[..., Any]


def call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Run one step of a stage as a plain function call."""
    return fn(*args, **kwargs)
