"""The SWE-bench harness's run report, from ``codeloop exec``'s verdict rows.

Keys and meaning as the harness's final report (schema_version 2): every prediction's
instance is submitted; an empty ``model_patch`` is an empty-patch instance (not judged
as completed); a row that reached a verdict is completed, resolved or unresolved; a row
that reached none is an error. Tasks of the tasks file with no prediction are
incomplete. A repeated instance id counts once, its last prediction winning (the
harness keys predictions by instance id).

Departure from the harness: a patch that does not apply, times out, or is too large is
the model's failure, so *unresolved* (the harness writes no instance report for a patch
it cannot apply and so counts it an error). Errors are failures on our side of the
line: a task the loader rejected (``task_rejected``) and a judge that could not reach a
verdict (``judge_error``).
"""

from __future__ import annotations

from typing import Any

ERROR_STATUSES = ("task_rejected", "judge_error")
SCHEMA_VERSION = 2


def harness_report(
    predictions: list[dict[str, Any]], rows: list[dict[str, Any]], task_ids: list[str]
) -> dict[str, Any]:
    """The report of ``rows`` (one verdict row per prediction, same order) over the
    tasks ``task_ids`` (every instance of the tasks file, usable or rejected)."""
    last: dict[str, tuple[dict, dict]] = {}
    for pred, row in zip(predictions, rows, strict=True):
        last[pred["instance_id"]] = (pred, row)
    empty, resolved, unresolved, error = set(), set(), set(), set()
    for iid, (pred, row) in last.items():
        if not (pred.get("model_patch") or "").strip():
            empty.add(iid)  # before anything else, as the harness checks it
        elif row.get("status") in ERROR_STATUSES:
            error.add(iid)
        elif row.get("resolved"):
            resolved.add(iid)
        else:
            unresolved.add(iid)
    completed = resolved | unresolved
    return {
        "total_instances": len(set(task_ids)),
        "submitted_instances": len(last),
        "completed_instances": len(completed),
        "resolved_instances": len(resolved),
        "unresolved_instances": len(unresolved),
        "empty_patch_instances": len(empty),
        "error_instances": len(error),
        "completed_ids": sorted(completed),
        "incomplete_ids": sorted(set(task_ids) - set(last)),
        "empty_patch_ids": sorted(empty),
        "submitted_ids": sorted(last),
        "resolved_ids": sorted(resolved),
        "unresolved_ids": sorted(unresolved),
        "error_ids": sorted(error),
        "schema_version": SCHEMA_VERSION,
    }
