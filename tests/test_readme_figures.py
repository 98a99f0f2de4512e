"""README's results table quotes metrics/ exactly, and README quotes no figure anywhere else.

Each row of the table under ``## Results`` names a metrics file (CSV or JSON lines), a row
selector (``key=value, ...``: exactly one row or record must match) and a column; a value
``a ± b`` pairs with a column ``x ± y``. A README value must equal the metric rounded half-up
to the decimals the README shows, sign included.
"""

from __future__ import annotations

import csv
import json
import re
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
HEADER = ["result", "value", "metrics file", "row", "column"]
NUMBER = re.compile(r"^[+-]?\d+(\.\d+)?$")


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _unquote(cell: str) -> str:
    return cell.strip().strip("`").strip()


def results_section(text: str) -> tuple[int, int]:
    """Character span of the ``## Results`` section (to the next ``## `` heading)."""
    m = re.search(r"^## Results[ \t]*$", text, re.M)
    assert m, "README.md has no '## Results' section"
    nxt = re.search(r"^## ", text[m.end():], re.M)
    return m.start(), m.end() + (nxt.start() if nxt else len(text) - m.end())


def results_table(text: str) -> list[dict[str, str]]:
    """The rows of the results table, keyed by HEADER."""
    start, end = results_section(text)
    lines = [ln for ln in text[start:end].splitlines() if ln.lstrip().startswith("|")]
    assert lines, "the Results section has no table"
    assert _cells(lines[0]) == HEADER, f"results table header must be {HEADER}"
    assert set(lines[1].replace("|", "").strip()) <= set("-: "), "no header separator"
    rows = [dict(zip(HEADER, _cells(ln), strict=True)) for ln in lines[2:]]
    assert rows, "the results table is empty"
    return rows


def _records(path: Path) -> list[dict]:
    if path.suffix == ".csv":
        with path.open(newline="") as fh:
            return list(csv.DictReader(fh))
    if path.suffix == ".jsonl":
        return [json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()]
    if path.suffix == ".json":
        data = json.loads(path.read_text())
        return data if isinstance(data, list) else [data]
    raise AssertionError(f"{path}: not a CSV or JSON metrics file")


def _selector(cell: str) -> dict[str, str]:
    sel = {}
    for part in _unquote(cell).split(","):
        key, sep, value = part.partition("=")
        assert sep, f"row selector {cell!r}: expected key=value"
        sel[key.strip()] = value.strip()
    return sel


def _metric_text(value) -> str:
    # a CSV cell is already the stored text; a JSON float's repr is its shortest exact text
    return value if isinstance(value, str) else repr(value)


def _rounded(metric: str, shown: str) -> Decimal:
    places = len(shown.split(".")[1]) if "." in shown else 0
    return Decimal(metric).quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_UP)


def check_row(row: dict[str, str], root: Path = ROOT) -> list[str]:
    """The problems of one table row (empty when every figure matches its metric)."""
    path = root / _unquote(row["metrics file"])
    if not path.is_file():
        return [f"{row['result']!r}: no metrics file {path}"]
    sel = _selector(row["row"])
    matches = [r for r in _records(path) if all(str(r.get(k)) == v for k, v in sel.items())]
    if len(matches) != 1:
        return [f"{row['result']!r}: {len(matches)} rows of {path.name} match {sel}"]
    columns = [_unquote(c) for c in _unquote(row["column"]).split("±")]
    values = [v.strip() for v in row["value"].split("±")]
    if len(columns) != len(values):
        return [f"{row['result']!r}: {len(values)} values for {len(columns)} columns"]
    problems = []
    for column, shown in zip(columns, values, strict=True):
        if not NUMBER.match(shown):
            problems.append(f"{row['result']!r}: value {shown!r} is not a number")
            continue
        raw = matches[0].get(column)
        if raw in (None, ""):
            problems.append(f"{row['result']!r}: {path.name} has no {column!r} in that row")
            continue
        want = _rounded(_metric_text(raw), shown)
        if Decimal(shown) != want:
            problems.append(f"{row['result']!r}: README {shown}, {path.name} {column} = {raw} "
                            f"(rounded as shown: {want})")
    return problems


def test_every_results_table_figure_equals_its_metric():
    problems = [p for row in results_table(README.read_text()) for p in check_row(row)]
    assert not problems, "\n".join(problems)


def test_every_row_names_a_file_under_metrics():
    for row in results_table(README.read_text()):
        assert _unquote(row["metrics file"]).startswith("metrics/"), row


def test_an_edited_readme_value_fails_the_check():
    row = results_table(README.read_text())[0]
    first = row["value"].split("±")[0].strip()
    places = len(first.split(".")[1]) if "." in first else 0
    bumped = Decimal(first) + Decimal(1).scaleb(-places)
    edited = dict(row, value=row["value"].replace(first, f"{bumped:+f}" if first[0] in "+-"
                                                  else f"{bumped:f}", 1))
    assert check_row(row) == []
    assert check_row(edited), f"an edited value passed: {edited['value']}"


def test_a_selector_matching_no_row_fails_the_check():
    row = dict(results_table(README.read_text())[0], row="`iteration=-1`")
    assert check_row(row)


# A measured figure in prose: a decimal fraction, a ratio like 1.13x, a percentage, a
# rate, or a duration/size with a unit. Code (fenced blocks, inline `spans`) and tables
# hold commands, config values and constants, so they are not prose.
_FIGURE = re.compile(
    r"(?<![\w.])(\d+(\.\d+)? ?(ms|s|min|minutes|seconds|tokens/s|MB|GB)|\d+(\.\d+)?x|"
    r"\d+(\.\d+)? ?%|\d+\.\d+)(?![\w.])"
)


def _prose(text: str) -> str:
    text = re.sub(r"^```.*?^```[ \t]*$", "", text, flags=re.M | re.S)
    text = re.sub(r"`[^`\n]*`", "", text)
    return "\n".join(ln for ln in text.splitlines() if not ln.lstrip().startswith("|"))


def test_no_measured_figure_in_readme_prose():
    text = README.read_text()
    start, end = results_section(text)
    prose = _prose(text[:start] + text[end:])
    # not measured: the Python version, and memory computed from the parameter count
    allowed = {"3.11", "2.0 GB", "4.0 GB", "1.0 GB", "10 GB"}
    found = [m.group(0) for m in _FIGURE.finditer(prose) if m.group(0) not in allowed]
    assert not found, f"figures outside the results table: {found}"


@pytest.mark.parametrize("prose, figure", [("resolved 0.42 of them", True),
                                            ("1.13x faster", True),
                                            ("fixes ~4% of them", True),
                                            ("took 403 s", True),
                                            ("the `0.42` in code", False),
                                            ("iter-0003 and Qwen2", False)])
def test_the_prose_figure_pattern(prose, figure):
    assert bool(_FIGURE.search(_prose(prose))) is figure
