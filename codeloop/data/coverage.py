"""Statement and branch coverage of a function task's reference solution by a set of tests.

A report figure (how much of the reference do a task's tests exercise?), never a reward.
The reference only ever runs in the sandbox; the parent analyses its source statically.

How one measurement works:

1. The child program is a wrapper (``coverage_job``): line 1 execs a small stdlib-only
   tracer (``PRELUDE``, compiled as ``<codeloop-coverage>``); line 2 hands it the reference
   source, which it compiles as its own file ``<reference>`` and runs into the program's
   namespace under ``sys.settrace``. Compiling the reference apart keeps its line numbers
   exact and its ``from __future__`` imports legal, and the filename tells its frames from
   the harness's and the tests' (``<test>``), which are not traced. The tracer records
   arcs the way coverage.py's own Python tracer does: ``(prev_line, line)`` per line
   event, ``(-first_line, line)`` on entering a code object and ``(line, -first_line)`` on
   leaving it (a generator's yield is not a leaving). The wrapper ends with a block that
   never runs, defining the safe names the reference redefines, so the executor's
   shadowing scan (``split.shadowed_names``) plans the tests as it would for the bare
   reference (the source itself travels as a string literal, invisible to that scan).
2. The tests run in order in that one child, then a last test
   ``assert __codeloop_cov__() == None`` whose single hole returns the recorded arcs as a
   plain list of ``[a, b]`` int pairs (``TestResult.value``); its verdict is meaningless.
3. The parent parses the reference with coverage.py's ``PythonParser`` (statements,
   possible arcs, exits per line) and maps the recorded arcs as coverage.py's analysis
   does (first lines of multi-line statements, ``with`` exit fixes). A branch is a
   possible arc from a line with more than one possible exit; covered shares are taken
   over the static sets only, so no recorded arc can push a share above 1.

Unmeasurable (``None``, never 0): stdio tasks, tasks without a reference or with one that
does not parse; tasks with setup code or any test the executor judges whole in its
evaluator child (``plan_job`` kind ``eval``: those run after the read-out, or the read-out
itself is judged whole and no value comes back); and runs where the reference fails to
load (raises at import), the child dies or times out before the read-out, the value is
not a list of int pairs, or the tracer was switched off (the reference called
``sys.settrace``, or the tracer raised). A test that fails or raises is still measured:
the lines it ran before raising count. Threads the reference starts are not traced.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from coverage.exceptions import NotPython
from coverage.parser import PythonParser

from codeloop.sandbox.base import ExecJob, ExecResult, Executor
from codeloop.sandbox.split import shadowed_names
from codeloop.sandbox.verdicts import plan_job
from codeloop.schema import Task

READOUT = "assert __codeloop_cov__() == None"

# Runs in the sandbox child (stdlib only). Arc bookkeeping follows coverage.py's PyTracer
# on CPython 3.11 to 3.13 (the sandbox's python is 3.11; checked against coverage.py's own
# arcs on generators, try/except, with, match, loops with break/continue, decorators): RESUME's argument tells a call (0) from a generator resuming; a
# return event is a real return unless the next instruction is a RESUME (a yield);
# line events on PUSH_EXC_INFO (entering an except block) are not lines.
PRELUDE = """
import sys

_FILE = "<reference>"
_OPS = {(3, 11): (151, 35)}  # (RESUME, PUSH_EXC_INFO): importing opcode costs ~1.5 ms a job
_ops = _OPS.get(sys.version_info[:2])
if _ops is None:
    import opcode

    _ops = (opcode.opmap.get("RESUME", -1), opcode.opmap.get("PUSH_EXC_INFO", -1))
_RESUME, _PUSH_EXC_INFO = _ops
_LASTI_IS_YIELD = sys.version_info[:2] != (3, 13)
_arcs = set()
_add = _arcs.add


def _real_call(frame, code):
    if _RESUME < 0:
        return frame.f_lasti < 0
    return code[frame.f_lasti + 1] == 0


def _real_return(frame, code):
    lasti = frame.f_lasti
    if _RESUME < 0 or len(code) == lasti + 2:
        return True
    if _LASTI_IS_YIELD:
        lasti += 2
    return lasti >= len(code) or code[lasti] != _RESUME


def _frame_tracer(frame):
    fcode = frame.f_code
    code = fcode.co_code
    exit_line = -fcode.co_firstlineno
    last = exit_line if _real_call(frame, code) else frame.f_lineno

    def trace(frame, event, arg):
        nonlocal last
        if event == "line":
            lasti = frame.f_lasti
            if 0 <= lasti < len(code) and code[lasti] == _PUSH_EXC_INFO:
                return trace
            line = frame.f_lineno
            _add((last, line))
            last = line
        elif event == "return" and _real_return(frame, code):
            _add((last, exit_line))
        return trace

    return trace


def _global(frame, event, arg):
    if event == "call" and frame.f_code.co_filename == _FILE:
        return _frame_tracer(frame)
    return None


def __codeloop_load__(source, namespace):
    compiled = compile(source, _FILE, "exec", dont_inherit=True)
    sys.settrace(_global)
    exec(compiled, namespace)


def __codeloop_cov__():
    intact = sys.gettrace() is _global
    sys.settrace(None)
    return sorted([a, b] for a, b in _arcs) if intact else None
"""


@dataclass(frozen=True)
class Coverage:
    """Covered shares (0..1) of the reference's statements and branch arcs, with counts.
    A share whose total is 0 is 1.0 (nothing to miss)."""

    statements: float
    branches: float
    statements_covered: int
    statements_total: int
    branches_covered: int
    branches_total: int


@dataclass(frozen=True)
class _Static:
    """What the parser says about a reference: what can run and where it can go."""

    parser: PythonParser
    statements: frozenset[int]
    arcs: frozenset[tuple[int, int]]
    branch_arcs: frozenset[tuple[int, int]]


@lru_cache(maxsize=4096)
def _static(reference: str) -> _Static | None:
    """The reference's statements and arcs by static analysis (parsed and compiled,
    never run); None if it does not parse. Cached: each job needs it twice."""
    parser = PythonParser(text=reference, filename="<reference>")
    try:
        parser.parse_source()
        arcs = parser.arcs()
    except (NotPython, SyntaxError, ValueError):
        return None
    exits = parser.exit_counts()
    branch_lines = {line for line, n in exits.items() if n > 1}
    branch_arcs = frozenset(arc for arc in arcs if arc[0] in branch_lines)
    return _Static(parser, frozenset(parser.statements), frozenset(arcs), branch_arcs)


def _wrapper(reference: str) -> str:
    """The child program: tracer, then the reference under it, then the dead block that
    shows the executor's shadowing scan the safe names the reference redefines."""
    lines = [
        f'exec(compile({PRELUDE!r}, "<codeloop-coverage>", "exec"), globals())',
        f"__codeloop_load__({reference!r}, globals())",
    ]
    names = sorted(shadowed_names(reference))
    if names:
        lines.append("if 0:  # never runs: names for the executor's shadowing scan")
        lines += [f"    def {name}(): pass" for name in names]
    return "\n".join(lines) + "\n"


def coverage_job(task: Task, tests: list[str], timeout_s: float | None = None) -> ExecJob | None:
    """The sandbox job that measures ``tests`` on ``task``'s reference, or None when the
    task is unmeasurable before running (see the module docstring)."""
    if task.io_style != "function" or not task.reference_solution.strip():
        return None
    if task.setup_code.strip() or _static(task.reference_solution) is None:
        return None
    job = ExecJob(
        code=_wrapper(task.reference_solution),
        tests=[*tests, READOUT],
        entry_point=task.entry_point,
        timeout_s=timeout_s,
    )
    if any(plan.kind != "holes" for plan in plan_job(job)):
        return None  # an eval test runs after the read-out (or the read-out is eval)
    return job


def _recorded_arcs(result: ExecResult) -> set[tuple[int, int]] | None:
    """The arcs the read-out returned, or None if it did not return a list of int pairs."""
    if not result.test_results:
        return None
    value = result.test_results[-1].value
    if type(value) is not list:
        return None
    arcs = set()
    for pair in value:
        if type(pair) is not list or len(pair) != 2 or any(type(x) is not int for x in pair):
            return None
        arcs.add((pair[0], pair[1]))
    return arcs


def _executed_arcs(static: _Static, recorded: set[tuple[int, int]]) -> set[tuple[int, int]]:
    """Recorded arcs in the parser's terms, as coverage.py's analysis maps them: first
    lines of multi-line statements, ``with`` exit fixes, and an arc that stays on one
    line standing for that line's only possible exit."""
    parser = static.parser
    dests: dict[int, set[int]] = {}
    for a, b in static.arcs:
        dests.setdefault(a, set()).add(b)
    out = set()
    for a, b in parser.translate_arcs(recorded):
        if a != b:
            out.add((a, b))
        elif len(dests.get(a, ())) == 1:
            out.add((a, next(iter(dests[a]))))
    return parser.translate_arcs(out)


def _share(covered: int, total: int) -> float:
    return covered / total if total else 1.0


def coverage_of(task: Task, result: ExecResult) -> Coverage | None:
    """The coverage a ``coverage_job`` result shows, or None if it shows none."""
    static = _static(task.reference_solution)
    recorded = _recorded_arcs(result)
    if static is None or recorded is None:
        return None
    lines = {line for arc in recorded for line in arc if line > 0}
    stmts = len(static.parser.translate_lines(lines) & static.statements)
    branches = len(_executed_arcs(static, recorded) & static.branch_arcs)
    n_stmts, n_branches = len(static.statements), len(static.branch_arcs)
    return Coverage(
        statements=_share(stmts, n_stmts),
        branches=_share(branches, n_branches),
        statements_covered=stmts,
        statements_total=n_stmts,
        branches_covered=branches,
        branches_total=n_branches,
    )


def reference_coverage(
    executor: Executor,
    tasks_and_tests: list[tuple[Task, list[str]]],
    timeout_s: float | None = None,
) -> list[Coverage | None]:
    """Coverage of each task's reference by its tests, in input order, with one
    ``run_many`` call for all measurable pairs. ``timeout_s``: per job (None: the
    executor's default); tracing makes the reference run several times slower."""
    jobs = [coverage_job(task, tests, timeout_s) for task, tests in tasks_and_tests]
    ran = iter(executor.run_many([job for job in jobs if job is not None]))
    out: list[Coverage | None] = []
    for (task, _), job in zip(tasks_and_tests, jobs, strict=True):
        out.append(None if job is None else coverage_of(task, next(ran)))
    return out
