"""The host side of the verdict channel: only records that add up make a test pass."""

from __future__ import annotations

import json

from codeloop.agent.channel import read_channel

NONCE = "c0ffee"
IDS = ["tests/test_a.py::test_one", "tests/test_a.py::test_two"]


def records(outcomes=("passed", "passed"), *, pid=7, finish=True, status=0):
    """An honest run's records: start, collected, three phases per test, finish."""
    recs = [{"k": "start"}, {"k": "collected", "ids": IDS}]
    for node, out in zip(IDS, outcomes, strict=True):
        recs.append({"k": "rep", "id": node, "when": "setup", "outcome": "passed"})
        recs.append({"k": "rep", "id": node, "when": "call", "outcome": out,
                     "exc": "AssertionError" if out == "failed" else ""})
        recs.append({"k": "rep", "id": node, "when": "teardown", "outcome": "passed"})
    if finish:
        recs.append({"k": "finish", "status": status, "records": len(recs)})
    return [{"n": NONCE, "seq": i, "pid": pid, **r} for i, r in enumerate(recs)]


def text(recs) -> str:
    return "".join(json.dumps(r) + "\n" for r in recs)


def test_an_honest_run_passes_its_passing_tests():
    rep = read_channel(text(records(("passed", "failed"), status=1)), NONCE, IDS, 1)
    assert rep.outcomes == {IDS[0]: "passed", IDS[1]: "failed"}
    assert (rep.flags, rep.collected_ok, rep.finished) == ([], True, True)


def test_the_failure_type_is_kept_for_partial_credit():
    rep = read_channel(text(records(("passed", "failed"), status=1)), NONCE, IDS, 1)
    assert rep.failure_types == {IDS[1]: "AssertionError"}


def test_a_line_without_the_nonce_makes_the_run_untrusted():
    fake = '{"n": "guess", "seq": 3, "k": "rep"}\n'
    rep = read_channel(text(records()) + fake, NONCE, IDS, 0)
    assert set(rep.outcomes.values()) == {"untrusted"}
    assert rep.flags == ["channel_forged"]


def test_a_doubled_phase_makes_the_run_untrusted():
    recs = records(("failed", "passed"))
    dup = dict(recs[3], outcome="passed")
    recs = recs[:4] + [dup] + recs[4:]
    for i, r in enumerate(recs):
        r["seq"] = i
    recs[-1]["records"] = len(recs) - 1
    rep = read_channel(text(recs), NONCE, IDS, 0)
    assert rep.outcomes[IDS[0]] == "untrusted" and "channel_forged" in rep.flags


def test_a_replayed_sequence_number_makes_the_run_untrusted():
    recs = records()
    rep = read_channel(text(recs[:5] + [recs[4]] + recs[5:]), NONCE, IDS, 0)
    assert "channel_forged" in rep.flags


def test_a_record_from_another_pid_makes_the_run_untrusted():
    recs = records()
    recs[4]["pid"] = 8  # a forked child writing with the nonce it inherited
    assert read_channel(text(recs), NONCE, IDS, 0).outcomes[IDS[0]] == "untrusted"


def test_a_record_after_finish_makes_the_run_untrusted():
    recs = records(("failed", "passed"))
    extra = {"n": NONCE, "seq": len(recs), "pid": 7, "k": "rep", "id": IDS[0], "when": "x"}
    assert "channel_forged" in read_channel(text([*recs, extra]), NONCE, IDS, 0).flags


def test_an_exit_status_other_than_the_finish_record_says_is_forgery():
    rep = read_channel(text(records(status=1)), NONCE, IDS, 0)
    assert "channel_forged" in rep.flags and not rep.finished


def test_an_early_exit_keeps_completed_tests_and_misses_the_rest():
    recs = records(finish=False)[:5]  # test_one done, test_two never set up
    rep = read_channel(text(recs), NONCE, IDS, 0)
    assert rep.outcomes == {IDS[0]: "passed", IDS[1]: "missing"}
    assert rep.flags == ["early_exit"]


def test_a_timeout_is_not_an_early_exit():
    rep = read_channel(text(records(finish=False)[:5]), NONCE, IDS, None, timed_out=True)
    assert rep.flags == [] and rep.outcomes[IDS[1]] == "missing"


def test_a_call_without_its_teardown_is_missing():
    recs = records(finish=False)[:4]
    assert read_channel(text(recs), NONCE, IDS, 0).outcomes[IDS[0]] == "missing"


def test_a_tamper_record_makes_every_test_untrusted():
    recs = records()
    recs.insert(2, {"n": NONCE, "seq": 2, "pid": 7, "k": "tamper", "what": ["x"]})
    for i, r in enumerate(recs):
        r["seq"] = i
    recs[-1]["records"] = len(recs) - 1
    rep = read_channel(text(recs), NONCE, IDS, 0)
    assert rep.flags == ["harness_tampered"] and set(rep.outcomes.values()) == {"untrusted"}


def test_a_requested_test_that_was_not_collected_is_missing():
    rep = read_channel(text(records()), NONCE, [*IDS, "tests/test_b.py::test_c"], 0)
    assert rep.outcomes["tests/test_b.py::test_c"] == "missing" and not rep.collected_ok


def test_a_skipped_or_xfailed_test_is_not_passed():
    recs = records()
    recs[3]["outcome"] = "skipped"
    recs[6]["xfail"] = True  # an xpass
    rep = read_channel(text(recs), NONCE, IDS, 0)
    assert rep.outcomes == {IDS[0]: "skipped", IDS[1]: "xpassed"}


def test_no_records_at_all_pass_nothing():
    rep = read_channel("PASSED tests/test_a.py::test_one\n", NONCE, IDS, 0)
    assert set(rep.outcomes.values()) == {"untrusted"}
