"""Vectorised MinHash equals datasketch's, and dedupe finds planted near-duplicates."""

from __future__ import annotations

import numpy as np
from datasketch import MinHash

from codeloop.data import minhash, tokens
from codeloop.data.dedupe import exact_dedupe, near_dedupe, normalise_code
from codeloop.schema import Task


def test_batch_signatures_equal_datasketch_affine32_on_the_same_shingles():
    docs = ["def f(a, b):\n    return a + b", "x = 1", "", "print('hello world') # hi"]
    hashes, seg = minhash.shingle_hashes([minhash.code_tokens(d) for d in docs], 3)
    sig = minhash.minhash_batch(hashes, seg, 128, seed=1)
    bounds = list(seg) + [len(hashes)]
    for d in range(len(docs)):
        m = MinHash(num_perm=128, seed=1, hashfunc=lambda x: x, scheme="affine32")
        m.update_batch([int(h) for h in hashes[bounds[d] : bounds[d + 1]]])
        assert np.array_equal(m.hashvalues, sig[d])


def test_renaming_and_reformatting_leave_the_code_signature_unchanged():
    a = "def total(xs):\n    s = 0\n    for x in xs:\n        s += x\n    return (s);"
    b = "def add_all(values):\n  acc = 0\n  for v in values:\n    acc += v\n  return acc"
    sig = minhash.signatures([("sum a list", a), ("sum a list", b)], 64)
    assert np.array_equal(sig[0], sig[1])


def test_parallel_signatures_equal_serial_ones():
    docs = [(f"task {i} adds {i % 7}", f"def f(x):\n    return x + {i}") for i in range(300)]
    serial = minhash.signatures(docs, 64)
    parallel = minhash.signatures_parallel(docs, 64, workers=2, batch=50)
    assert np.array_equal(serial, parallel)


def _task(tid: str, prompt: str, code: str) -> Task:
    return Task(task_id=tid, source="t", prompt=prompt, entry_point="f", reference_solution=code,
                visible_tests=["assert f(1) == 1"])


def test_exact_dedupe_keeps_the_first_and_ignores_formatting_and_docstrings():
    a = _task("a", "Reverse a string.", "def f(s):\n    return s[::-1]")
    b = _task("b", "reverse a  string", 'def f(s):\n    """doc"""\n    return s[::-1]  # c')
    res = exact_dedupe([a, b])
    assert [t.task_id for t in res.kept] == ["a"]
    assert res.dropped[0]["duplicate_of"] == "a"


def test_near_dedupe_drops_an_edited_copy_and_names_the_kept_task():
    code = "def f(xs):\n    out = []\n    for x in xs:\n        if x % 2 == 0:\n            out.append(x * x)\n    return out"  # noqa: E501
    copy = code.replace("xs", "items").replace("out", "res").replace("    ", "  ")
    a = _task("a", "Write a function to square the even numbers of a list.", code)
    b = _task("b", "Write a python function to square the even numbers of a list.", copy)
    c = _task(
        "c",
        "Write a function to parse a date string into a tuple.",
        "def f(s):\n    return tuple(map(int, s.split('-')))",
    )  # noqa: E501
    res = near_dedupe([a, b, c], threshold=0.7, num_perm=128, workers=1)
    assert [t.task_id for t in res.kept] == ["a", "c"]
    assert res.clusters() == [{"representative": "a", "members": ["b"], "kinds": ["near"]}]


def test_normalise_code_falls_back_to_text_for_unparsable_code():
    assert normalise_code("def f(:\n   pass") == "def f(: pass"


def test_numpy_banding_finds_the_same_duplicates_as_datasketch_lsh():
    from codeloop.data.dedupe import banded_near_duplicates, greedy_near_duplicates

    rng = np.random.default_rng(0)
    docs = []
    for i in range(400):
        words = " ".join(f"w{x}" for x in rng.integers(0, 5000, 12))
        docs.append((words, f"def f(a):\n    return a * {i} + {int(rng.integers(1000))}"))
    docs += [(p + " please", c.replace("    ", "  ")) for p, c in docs[:40]]
    sig = minhash.signatures(docs, 128)
    ours = banded_near_duplicates(sig, 0.7, 128)
    assert ours == greedy_near_duplicates(sig, 0.7, 128)
    assert set(ours) == set(range(400, 440))


def test_canonical_code_ignores_renaming_reformatting_comments_and_statement_order():
    from codeloop.data.canon import canonical_code

    a = "import re\ndef f(xs):\n    out = []\n    seen = set()\n    for x in xs:\n        out.append(re.sub('a', 'b', x))\n    return out, seen"  # noqa: E501
    b = '# copied\ndef g(items):\n  found = set()\n  res = []\n  for it in items:\n    res.append(m.sub("a", "b", it))\n  return (res, found)\nimport re'  # noqa: E501
    assert canonical_code(a) == canonical_code(b)


def test_canonical_code_keeps_literals_and_operators_apart():
    from codeloop.data.canon import canonical_code

    fourth = "def f(n):\n    return sum(i * i * i * i for i in range(n))"
    fifth = "def f(n):\n    return sum(i * i * i * i * i for i in range(n))"
    assert canonical_code(fourth) != canonical_code(fifth)
    assert canonical_code("def f(x):\n    return x + 1") != canonical_code(
        "def f(x):\n    return x + 2"
    )  # noqa: E501


def test_near_dedupe_keeps_template_twins_that_differ_in_a_number_word():
    a = _task("a", "Write a python function to find the sum of fourth power of first n natural numbers.",  # noqa: E501
              "def f(n):\n    s = 0\n    for i in range(1, n + 1):\n        s += i * i * i * i\n    return s")  # noqa: E501
    b = _task("b", "Write a python function to find the sum of fifth power of first n natural numbers.",  # noqa: E501
              "def f(n):\n    s = 0\n    for i in range(1, n + 1):\n        s += i * i * i * i * i\n    return s")  # noqa: E501
    res = near_dedupe([a, b], threshold=0.9, num_perm=128, workers=1)
    assert [t.task_id for t in res.kept] == ["a", "b"]


def test_near_dedupe_drops_a_renamed_reordered_copy_with_a_reworded_prompt():
    code = "def f(a, b):\n    total = a + b\n    count = 0\n    while total > 0:\n        total //= 10\n        count += 1\n    return count"  # noqa: E501
    copy = "def digits(x, y):\n  n = 0\n  s = x + y\n  while s > 0:\n    n += 1\n    s //= 10\n  return n"  # noqa: E501
    a = _task("a", "Write a function to add two numbers and print number of digits of sum.", code)
    b = _task("b", "Create a function to add two numbers and print number of digits of sum.", copy)  # noqa: E501
    res = near_dedupe([a, b], threshold=0.9, num_perm=128, workers=1)
    assert [t.task_id for t in res.kept] == ["a"]
    assert res.dropped[0]["basis"] == "same_code"


def test_line_cached_code_tokens_equal_tokenising_the_whole_code():
    codes = [
        "def f(a):  # note ' quote\n    s = 'x#y'\n    return a.  strip() + \"q\"\n",
        'def g():\n    """doc\n    spans # lines"""\n    return 1\n',
        "x = '''a\nb'''; y = 2",
        "",
        "z = 'unterminated\nw = z",
    ]
    for code in codes:
        assert minhash.code_tokens(code) == tokens._tokens_whole(code), code


def test_flow_key_ignores_renaming_and_statement_order_but_not_swapped_operands():
    from codeloop.data.canon import flow_key

    a = "def f(cost, sale):\n    n = 0\n    m = 1\n    if cost > sale:\n        return cost - sale + n * m"
    renamed = "def g(x, y):\n    q = 1\n    p = 0\n    if x > y:\n        return x - y + p * q"
    swapped = "def f(cost, sale):\n    n = 0\n    m = 1\n    if sale > cost:\n        return sale - cost + n * m"  # noqa: E501
    assert flow_key(a) == flow_key(renamed)
    assert flow_key(a) != flow_key(swapped)


def test_near_dedupe_keeps_two_tasks_whose_code_differs_only_in_operand_order():
    profit = "def profit_amount(actual_cost, sale_amount):\n    if actual_cost > sale_amount:\n        amount = actual_cost - sale_amount\n        return amount\n    else:\n        return None"  # noqa: E501
    loss = (
        profit.replace("profit_amount", "loss_amount")
        .replace("actual_cost > sale_amount", "sale_amount > actual_cost")
        .replace("actual_cost - sale_amount", "sale_amount - actual_cost")
    )  # noqa: E501
    a = _task(
        "a",
        "Write a function that gives profit amount if the given amount has profit else return none.",
        profit,
    )  # noqa: E501
    b = _task(
        "b",
        "Write a function that gives loss amount if the given amount has loss else return none.",
        loss,
    )  # noqa: E501
    res = near_dedupe([a, b], threshold=0.9, num_perm=128, workers=1)
    assert [t.task_id for t in res.kept] == ["a", "b"]


def test_batched_tokenising_equals_tokenising_each_text_alone():
    prompts = ["Sum a LIST.", "", "qsepq QSEPQ words", "x\ny  z"]
    flat, lens = minhash.prompt_batch(prompts)
    alone = [tokens._hashes(tokens._WORD.findall(p.lower()), {}, tokens._PROMPT_SEED, str)
             for p in prompts]
    assert lens.tolist() == [len(a) for a in alone]
    assert flat.tolist() == [h for a in alone for h in a]
    codes = ["a = 1\nb = 'x\x00y'  # c", "def f():\n    return '''s\n'''", "", "y = a.b"]
    flat, lens = tokens._LineTable().tokens(codes)
    assert flat.tolist() == [h for c in codes for h in tokens._tokens_whole(c)]
    assert lens.tolist() == [len(tokens._tokens_whole(c)) for c in codes]


def test_line_table_gives_the_same_tokens_after_it_resets_to_bound_memory():
    table = tokens._LineTable()
    table.MAX_UNITS = 3
    codes = [f"x{i} = {i}\ny = x{i} * 2\nreturn y" for i in range(5)] + ["é = 'ü'\nz = 1"]
    for _ in range(2):
        flat, lens = table.tokens(codes)
        assert flat.tolist() == [h for c in codes for h in tokens._tokens_whole(c)]
        assert lens.tolist() == [len(tokens._tokens_whole(c)) for c in codes]


def test_a_copy_of_a_dropped_task_is_dropped_as_a_duplicate_of_its_representative():
    code = "def f(x):\n    return x * 2 + 1"
    a = _task("a", "alpha beta gamma delta epsilon zeta eta theta iota kappa", code)
    b = _task("b", "alpha beta gamma delta epsilon zeta eta lambda mu nu", code)
    c = _task(
        "c", "xi omicron pi delta epsilon zeta eta lambda mu nu", code
    )  # b's copy, far from a
    res = near_dedupe([a, b, c], threshold=0.9, num_perm=128, workers=1)
    assert [t.task_id for t in res.kept] == ["a"]
    assert [d["duplicate_of"] for d in res.dropped] == ["a", "a"]
