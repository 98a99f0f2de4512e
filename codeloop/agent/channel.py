"""Host side of the judge's verdict channel: count every record, trust only what adds up.

``read_channel`` takes what the sandboxed pytest run (codeloop.agent.judge_boot) wrote on
its result fd and the process's exit, and gives each requested node id an outcome. A test
counts as ``passed`` only when its setup, call and teardown were each reported exactly
once (and none of its call's subtests failed), by the pid that started, in sequence,
under this run's nonce, and the run itself adds up: one ``start`` first, one
``collected`` naming exactly the requested ids, a ``finish`` whose record count and exit
status match what we saw. A line without the
nonce, a gap or repeat in the sequence, another pid, a record after ``finish``, a doubled
phase or a tamper record make the whole run untrusted: nothing in it passes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

# Per-test outcomes; only "passed" passes.
OUTCOMES = ("passed", "failed", "error", "skipped", "xfailed", "xpassed", "missing", "untrusted")
# Run-level flags the channel raises (they join the patch's static hack flags).
CHANNEL_FLAGS = ("channel_forged", "harness_tampered", "early_exit")


@dataclass
class ChannelReport:
    outcomes: dict[str, str]  # every requested node id -> one of OUTCOMES
    failure_types: dict[str, str] = field(default_factory=dict)  # node id -> exception type
    collected_ok: bool = False  # pytest selected exactly the requested ids
    finished: bool = False  # a finish record agreeing with the process's exit
    flags: list[str] = field(default_factory=list)  # of CHANNEL_FLAGS
    problems: list[str] = field(default_factory=list)  # what did not add up, for people
    order: list[str] = field(default_factory=list)  # node ids in the order they ran
    details: dict[str, str] = field(default_factory=dict)  # node id -> first failure's text
    collect_errors: list[str] = field(default_factory=list)  # failure texts of collection

    @property
    def trusted(self) -> bool:
        return not {"channel_forged", "harness_tampered"} & set(self.flags)


class _Run:
    """The records of one run as they are read, with what is wrong with them."""

    def __init__(self, nonce: str) -> None:
        self.nonce = nonce
        self.pid = None
        self.phases: dict[str, dict[str, dict]] = {}
        self.collected: list[str] | None = None
        self.finish: dict | None = None
        self.forged: list[str] = []
        self.tampered: list[str] = []
        self.seq = 0
        self.order: list[str] = []
        self.collect_errors: list[str] = []
        self.sub_failed: dict[str, dict] = {}  # node id -> its first failed subtest's record

    def take(self, line: str) -> None:
        try:
            rec = json.loads(line)
        except ValueError:
            rec = None
        if not isinstance(rec, dict) or rec.get("n") != self.nonce:
            self.forged.append(f"a line without this run's nonce: {line[:80]!r}")
            return
        kind = rec.get("k")
        if rec.get("seq") != self.seq:
            self.forged.append(f"record {rec.get('seq')!r} where {self.seq} was due")
        self.seq += 1
        if self.seq == 1:
            self.pid = rec.get("pid")
            if kind != "start":
                self.forged.append(f"first record is {kind!r}, not start")
        elif rec.get("pid") != self.pid:
            self.forged.append(f"record {rec.get('seq')} from pid {rec.get('pid')}, not {self.pid}")
        if self.finish is not None:
            self.forged.append(f"record {kind!r} after finish")
        getattr(self, f"_on_{kind}", self._on_unknown)(rec)

    def _on_start(self, rec: dict) -> None:
        if self.seq != 1:
            self.forged.append("a second start record")

    def _on_collected(self, rec: dict) -> None:
        if self.collected is not None:
            self.forged.append("a second collected record")
        self.collected = [str(x) for x in rec.get("ids") or []]

    def _on_collect_error(self, rec: dict) -> None:
        # the ids it hid are simply not collected; its text is for the agent's view
        self.collect_errors.append(str(rec.get("lr") or ""))

    def _on_rep(self, rec: dict) -> None:
        node, when = str(rec.get("id")), str(rec.get("when"))
        if node not in self.phases:
            self.order.append(node)
        per = self.phases.setdefault(node, {})
        if when in per:
            self.forged.append(f"{node} {when} reported twice")
        per[when] = rec

    def _on_sub(self, rec: dict) -> None:
        # a subtest of a call phase: any number per test; a failed one fails the test
        node = str(rec.get("id"))
        if rec.get("outcome") == "failed":
            self.sub_failed.setdefault(node, rec)

    def _on_tamper(self, rec: dict) -> None:
        self.tampered += [str(x) for x in rec.get("what") or []]

    def _on_finish(self, rec: dict) -> None:
        if rec.get("records") != self.seq - 1:
            self.forged.append(f"finish counts {rec.get('records')} records, {self.seq - 1} came")
        self.finish = rec

    def _on_unknown(self, rec: dict) -> None:
        self.forged.append(f"unknown record kind {rec.get('k')!r}")


def _outcome(per: dict[str, dict]) -> tuple[str, str]:
    """One test's outcome from its phase records, and its failure's exception type."""
    setup, call, down = per.get("setup"), per.get("call"), per.get("teardown")
    if setup is None:
        return "missing", ""
    if setup.get("outcome") == "failed":
        return "error", str(setup.get("exc") or "")
    if setup.get("outcome") == "skipped":
        return ("xfailed" if setup.get("xfail") else "skipped"), ""
    if call is None:
        return "missing", ""
    exc = str(call.get("exc") or "")
    if call.get("outcome") == "failed":
        return "failed", exc
    if call.get("outcome") == "skipped":
        return ("xfailed" if call.get("xfail") else "skipped"), exc
    if call.get("outcome") != "passed":
        return "missing", ""
    if down is None:
        return "missing", ""
    if down.get("outcome") != "passed":
        return "error", str(down.get("exc") or "")
    return ("xpassed" if call.get("xfail") else "passed"), ""


def read_channel(
    text: str, nonce: str, requested: list[str], exit_code: int | None, *, timed_out: bool = False
) -> ChannelReport:
    """Outcomes of ``requested`` node ids from a run's result-fd ``text`` (see module doc).

    ``exit_code`` is the process's own exit status (None when a signal ended it); a run
    that exited by itself without a finish record raises ``early_exit``.
    """
    run = _Run(nonce)
    for line in text.splitlines():
        if line.strip():
            run.take(line)
    want = list(dict.fromkeys(requested))
    rep = ChannelReport(outcomes={})
    if run.collected is not None:
        rep.collected_ok = sorted(run.collected) == sorted(want)
        if not rep.collected_ok:
            extra = sorted(set(run.collected) - set(want))
            lost = sorted(set(want) - set(run.collected))
            rep.problems.append(f"collected {len(run.collected)} of {len(want)} requested "
                                f"(not collected: {lost[:5]}, unrequested: {extra[:5]})")
    else:
        rep.problems.append("no collected record")
    if run.finish is not None:
        rep.finished = run.finish.get("status") == exit_code
        if not rep.finished:
            run.forged.append(
                f"finish says status {run.finish.get('status')}, process exit {exit_code}"
            )
    elif exit_code is not None and not timed_out:
        rep.flags.append("early_exit")
        rep.problems.append(f"process exited {exit_code} without a finish record")
    if run.forged:
        rep.flags.append("channel_forged")
        rep.problems += run.forged[:20]
    if run.tampered:
        rep.flags.append("harness_tampered")
        rep.problems.append(f"pytest machinery changed during the run: {sorted(set(run.tampered))}")
    trusted = not run.forged and not run.tampered
    rep.order, rep.collect_errors = list(run.order), list(run.collect_errors)
    for node in run.order:
        recs = [*run.phases[node].values(), run.sub_failed.get(node, {})]
        text = next((str(r.get("lr") or "") for r in recs if r.get("outcome") == "failed"), "")
        if text:
            rep.details[node] = text
    for node in want:
        if not trusted:
            rep.outcomes[node] = "untrusted"
            continue
        outcome, exc = _outcome(run.phases.get(node, {}))
        if outcome in ("passed", "xpassed") and node in run.sub_failed:
            outcome, exc = "failed", str(run.sub_failed[node].get("exc") or "")
        rep.outcomes[node] = outcome
        if exc:
            rep.failure_types[node] = exc
    return rep
