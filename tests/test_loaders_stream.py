"""Loaders hand each accepted task to ``on_task`` as it loads, and only those."""

from __future__ import annotations

import json

from codeloop.data.loaders import detect_and_load


def test_on_task_sees_every_accepted_task_in_order_and_no_rejected_one(tmp_path):
    rows = [{"task_id": f"mbpp/{i}", "text": "t", "code": "def f(x):\n    return x\n",
             "test_list": ["assert f(1) == 1"]} for i in range(3)]
    rows.insert(1, {"task_id": "bad", "text": "t", "code": "", "test_list": ["assert f(1)"]})
    path = tmp_path / "mbpp.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    seen = []
    loaded = detect_and_load(str(path), seen.append)
    assert [t.task_id for t in seen] == [t.task_id for t in loaded.tasks]
    assert len(seen) == 3 and len(loaded.quarantine_rows) == 1
