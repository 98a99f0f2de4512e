"""Exact and near-duplicate removal over canonical tasks.

Exact: sha256 of the normalised prompt plus the normalised AST of the reference
solution (docstrings dropped, formatting and comments irrelevant). Near: MinHash of
prompt+code shingles (codeloop.minhash) in datasketch's MinHashLSH, candidates confirmed
by the estimated Jaccard. Both are greedy in input order: a task is dropped when it
matches one already kept, and it names that kept task. Callers order tasks by priority
(source order, then row), which makes the kept representative deterministic: the first.
"""

from __future__ import annotations

import ast
import hashlib
import re
from dataclasses import dataclass, field

import numpy as np
from datasketch import MinHashLSH

from codeloop import minhash
from codeloop.schema import Task

_WS = re.compile(r"\s+")
LSH_SLACK = 0.1


def normalise_prompt(text: str) -> str:
    """Lowercase, whitespace collapsed, surrounding punctuation stripped."""
    return _WS.sub(" ", text.lower()).strip(" .:;!?\n\t")


def _strip_docstrings(tree: ast.AST) -> ast.AST:
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (
            isinstance(body, list)
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            node.body = body[1:] or [ast.Pass()]
    return tree


def normalise_code(code: str) -> str:
    """The AST dump without docstrings or positions; whitespace-collapsed text if unparsable."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return _WS.sub(" ", code).strip()
    return ast.dump(_strip_docstrings(tree), annotate_fields=False, include_attributes=False)


def code_key(code: str) -> str:
    return hashlib.sha256(normalise_code(code).encode()).hexdigest()


def exact_key(task: Task) -> str:
    """sha256 of normalised prompt + normalised solution AST."""
    blob = normalise_prompt(task.prompt) + "\0" + normalise_code(task.reference_solution)
    return hashlib.sha256(blob.encode()).hexdigest()


@dataclass
class DedupeResult:
    """Which tasks stay; for each dropped one, the kept task it duplicates."""

    kept: list[Task] = field(default_factory=list)
    dropped: list[dict] = field(default_factory=list)  # {task_id, duplicate_of, kind, similarity}

    def clusters(self) -> list[dict]:
        """Clusters with at least one dropped member: representative + members, sorted."""
        groups: dict[str, list[dict]] = {}
        for d in self.dropped:
            groups.setdefault(d["duplicate_of"], []).append(d)
        return [
            {
                "representative": rep,
                "members": sorted(m["task_id"] for m in ms),
                "kinds": sorted({m["kind"] for m in ms}),
            }
            for rep, ms in sorted(groups.items())
        ]


def exact_dedupe(tasks: list[Task]) -> DedupeResult:
    """Drop tasks whose exact key equals an earlier task's."""
    res = DedupeResult()
    first: dict[str, str] = {}
    for t in tasks:
        k = exact_key(t)
        if k in first:
            res.dropped.append(
                {"task_id": t.task_id, "duplicate_of": first[k], "kind": "exact", "similarity": 1.0}
            )
        else:
            first[k] = t.task_id
            res.kept.append(t)
    return res


def greedy_near_duplicates(
    sig: np.ndarray, threshold: float, num_perm: int, seed: int = 1
) -> dict[int, tuple[int, float]]:
    """Map row -> (earlier kept row it duplicates, estimated Jaccard), greedy in row order.

    Only kept rows enter the index, so every match names a representative; LSH
    candidates are confirmed by the signature Jaccard (LSH alone over-reports).
    """
    # Banding is tuned a little below the threshold: LSH then misses almost no pair at
    # the threshold, and the signature Jaccard below decides.
    lsh = MinHashLSH(threshold=max(0.05, threshold - LSH_SLACK), num_perm=num_perm)
    dup: dict[int, tuple[int, float]] = {}
    for i in range(len(sig)):
        m = minhash.lean(sig[i], seed)
        cands = lsh.query(m)
        if cands:
            c = np.asarray(cands)
            sims = (sig[c] == sig[i]).mean(axis=1)
            best = int(np.lexsort((c, -sims))[0])
            if sims[best] >= threshold:
                dup[i] = (int(c[best]), float(sims[best]))
                continue
        lsh.insert(i, m, check_duplication=False)
    return dup


def _band_pairs(sig: np.ndarray, b: int, r: int, cap: int) -> tuple[np.ndarray, np.ndarray]:
    """(earlier, later) row pairs sharing at least one LSH band (up to cap earlier per bucket)."""
    n = len(sig)
    idx = np.arange(n)
    out_i, out_j = [], []
    for band in range(b):
        key = np.zeros(n, dtype=np.uint64)
        for c in range(band * r, (band + 1) * r):  # FNV-style fold of the band into 64 bits
            key = (key ^ sig[:, c].astype(np.uint64)) * np.uint64(0x100000001B3)
        order = np.lexsort((idx, key))
        ks = key[order]
        start = np.flatnonzero(np.r_[True, ks[1:] != ks[:-1]])
        sizes = np.diff(np.r_[start, n])
        if sizes.max() < 2:
            continue
        pos = idx - np.repeat(start, sizes)
        for d in range(1, min(cap, int(sizes.max()))):
            m = np.flatnonzero(pos >= d)
            out_i.append(order[m - d])
            out_j.append(order[m])
    if not out_i:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    pair = np.unique(np.concatenate(out_i) * n + np.concatenate(out_j))
    return pair // n, pair % n


def banded_near_duplicates(
    sig: np.ndarray, threshold: float, num_perm: int, cap: int = 64
) -> dict[int, tuple[int, float]]:
    """Same contract and banding as `greedy_near_duplicates`, with the index in numpy.

    datasketch's MinHashLSH spends ~200 us per document in Python dict/set updates;
    here the band keys of all rows are sorted at once and candidate pairs come from
    equal keys, so the index costs a few microseconds per document. The (b, r) banding
    is datasketch's own optimum for the threshold, and tests check both give the same
    duplicates. ``cap`` bounds the earlier rows paired per bucket (huge buckets are
    clusters of copies; the first 64 are plenty to find a kept one).
    """
    from datasketch.lsh import _optimal_param

    b, r = _optimal_param(max(0.05, threshold - LSH_SLACK), num_perm, 0.5, 0.5)
    pi, pj = _band_pairs(sig, b, r, cap)
    sims = np.empty(len(pi))
    for lo in range(0, len(pi), 100_000):
        sims[lo : lo + 100_000] = (sig[pi[lo : lo + 100_000]] == sig[pj[lo : lo + 100_000]]).mean(1)
    ok = sims >= threshold
    pi, pj, sims = pi[ok], pj[ok], sims[ok]
    order = np.lexsort((pi, -sims, pj))  # by later row, best similarity, earliest match
    dup: dict[int, tuple[int, float]] = {}
    for i, j, s in zip(pi[order].tolist(), pj[order].tolist(), sims[order].tolist(), strict=True):
        if j not in dup and i not in dup:  # first kept match of j in (similarity, row) order
            dup[j] = (i, s)
    return dup


def near_dedupe(
    tasks: list[Task], threshold: float, num_perm: int, workers: int = 2
) -> DedupeResult:
    """Drop tasks whose prompt+code MinHash matches an earlier kept task's."""
    res = DedupeResult()
    if not tasks:
        return res
    docs = [(t.prompt, t.reference_solution) for t in tasks]
    sig = minhash.signatures_parallel(docs, num_perm, workers=workers)
    dup = banded_near_duplicates(sig, threshold, num_perm)
    for i, t in enumerate(tasks):
        if i in dup:
            j, sim = dup[i]
            res.dropped.append(
                {
                    "task_id": t.task_id,
                    "duplicate_of": tasks[j].task_id,
                    "kind": "near",
                    "similarity": round(sim, 4),
                }
            )
        else:
            res.kept.append(t)
    return res
