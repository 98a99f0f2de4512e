"""Exact and near-duplicate removal over canonical tasks.

Exact: sha256 of the normalised prompt plus the normalised AST of the reference
solution (docstrings dropped, formatting and comments irrelevant). Near, in two steps:
MinHash of prompt+code shingles (codeloop.data.minhash) banded in numpy proposes candidate
pairs generously (``lsh_threshold`` on the prompt half's estimate), and `verify_pair`
decides each candidate exactly on canonical views (codeloop.data.canon): identical canonical
code with overlapping prompts, or high prompt+code Jaccard with no differing number or
contrast word ("fourth" vs "fifth"). Both steps are greedy in input order: a task is
dropped when it matches an earlier task, and it names the kept representative of that
task (itself, or the one it was dropped for: a copy of a copy joins the cluster even
when LSH did not pair it with the original). Callers order tasks by priority (source
order, then row), so the kept representative is the first.
"""

from __future__ import annotations

import ast
import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from datasketch import MinHashLSH

from codeloop.data import canon, minhash
from codeloop.schema import Task

_WS = re.compile(r"\s+")
LSH_SLACK = 0.1


def normalise_prompt(text: str) -> str:
    """Lowercase, whitespace collapsed, surrounding punctuation stripped."""
    return _WS.sub(" ", text.lower()).strip(" .:;!?\n\t")


def normalise_code(code: str) -> str:
    """The AST dump without docstrings or positions; whitespace-collapsed text if unparsable."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return _WS.sub(" ", code).strip()
    return ast.dump(canon.strip_docstrings(tree), annotate_fields=False, include_attributes=False)


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
        order = np.argsort(key, kind="stable")  # ties stay in row order
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


def _signature_pairs(sig: np.ndarray, lsh_threshold: float, cap: int):
    """LSH candidate pairs (earlier, later) and their signature Jaccard estimates."""
    from datasketch.lsh import _optimal_param

    b, r = _optimal_param(max(0.05, lsh_threshold), sig.shape[1], 0.5, 0.5)
    pi, pj = _band_pairs(sig, b, r, cap)
    sims = np.empty(len(pi))
    for lo in range(0, len(pi), 100_000):
        sl = slice(lo, lo + 100_000)
        sims[sl] = (sig[pi[sl]] == sig[pj[sl]]).mean(1)
    return pi, pj, sims


def banded_near_duplicates(
    sig: np.ndarray, threshold: float, num_perm: int, cap: int = 64
) -> dict[int, tuple[int, float]]:
    """Same contract and banding as `greedy_near_duplicates`, with the index in numpy.

    datasketch's MinHashLSH spends its time per document in Python dict/set updates;
    here the band keys of all rows are sorted at once and candidate pairs come from
    equal keys, so the index is a few numpy passes over the whole batch. The (b, r) banding
    is datasketch's own optimum for the threshold, and tests check both give the same
    duplicates. ``cap`` bounds the earlier rows paired per bucket (huge buckets are
    clusters of copies; the first 64 are plenty to find a kept one).
    """
    pi, pj, sims = _signature_pairs(sig, threshold - LSH_SLACK, cap)
    ok = sims >= threshold
    pi, pj, sims = pi[ok], pj[ok], sims[ok]
    order = np.lexsort((pi, -sims, pj))  # by later row, best similarity, earliest match
    dup: dict[int, tuple[int, float]] = {}
    for i, j, s in zip(pi[order].tolist(), pj[order].tolist(), sims[order].tolist(), strict=True):
        if j not in dup and i not in dup:  # first kept match of j in (similarity, row) order
            dup[j] = (i, s)
    return dup


@dataclass(frozen=True)
class NearRule:
    """When a candidate pair is a near-duplicate (see `verified_near_duplicates`)."""

    threshold: float = 0.9  # mean of prompt-word and canonical-code Jaccard, code differs
    prompt_floor: float = 0.5  # prompt-word Jaccard needed when the canonical code is equal
    lsh_threshold: float = 0.3  # LSH banding target on the prompt MinHash (candidates only)


class _Views:
    """Per-document verification views, computed once and only for candidate documents."""

    def __init__(self, docs: Sequence[tuple[str, str]]):
        self.docs, self.words, self.quick, self.canon, self.flows = docs, {}, {}, {}, {}

    def word(self, i: int) -> frozenset:
        if i not in self.words:
            self.words[i] = canon.prompt_words(self.docs[i][0])
        return self.words[i]

    def flow(self, i: int) -> tuple:
        if i not in self.flows:
            self.flows[i] = canon.flow_key(self.docs[i][1])
        return self.flows[i]

    def key(self, i: int) -> tuple[int, int]:
        if i not in self.quick:
            self.quick[i] = canon.quick_key(self.docs[i][1])
        return self.quick[i]

    def code(self, i: int) -> canon.Canonical:
        if i not in self.canon:
            self.canon[i] = canon.canonical(*self.docs[i])
        return self.canon[i]


def verify_pair(v: _Views, i: int, j: int, rule: NearRule) -> tuple[str, float] | None:
    """(basis, score) when documents i and j are near-duplicates, else None.

    ``same_code``: the canonical code (names blanked, layout, comments and the order of
    independent statements gone) and its data flow (`canon.flow_key`) are identical and
    the prompts share >= prompt_floor of their words; a differing number or contrast word does not matter then, the programs
    are the same. ``similar``: no such distinguishing word, and the mean of the prompt
    and canonical-code Jaccards is >= threshold.
    """
    pw = canon.jaccard(v.word(i), v.word(j))
    if pw < rule.prompt_floor and (pw + 1) / 2 < rule.threshold:
        return None  # neither basis can hold: skip the parse
    (qi, ei), (qj, ej) = v.key(i), v.key(j)
    if ei == ej or qi == qj or v.code(i).code == v.code(j).code:
        if ei != ej and v.flow(i) != v.flow(j):
            return None  # one shape, different data flow: profit (a - b) vs loss (b - a)
        return ("same_code", (pw + 1) / 2) if pw >= rule.prompt_floor else None
    if (pw + 1) / 2 < rule.threshold or canon.distinguishing(v.word(i), v.word(j)):
        return None
    score = (pw + canon.jaccard(v.code(i).shingles, v.code(j).shingles)) / 2
    return ("similar", score) if score >= rule.threshold else None


def verified_near_duplicates(
    docs: Sequence[tuple[str, str]], sig: np.ndarray, rule: NearRule, cap: int = 64
) -> dict[int, tuple[int, float, str]]:
    """Map row -> (earlier kept row, score, basis), greedy in row order.

    LSH on the prompt half of the MinHash signatures proposes pairs at
    ``rule.lsh_threshold`` (generous: an edited short prompt keeps few word bigrams;
    the full signature's estimate only orders the candidates); `verify_pair` decides
    each exactly, on canonical views of the two documents only. For each later row the
    candidates are tried by estimated similarity; a match with a dropped row names that
    row's representative.
    """
    # Both rules need the prompts to overlap, so the prompt half of the signature is
    # banded: code alone proposes many templated look-alikes that prompts then reject.
    pi, pj, _ = _signature_pairs(sig[:, : sig.shape[1] // 2], rule.lsh_threshold, cap)
    sims = np.empty(len(pi))
    for lo in range(0, len(pi), 100_000):
        sl = slice(lo, lo + 100_000)
        sims[sl] = (sig[pi[sl]] == sig[pj[sl]]).mean(1)
    order = np.lexsort((pi, -sims, pj))
    views = _Views(docs)
    dup: dict[int, tuple[int, float, str]] = {}
    for i, j in zip(pi[order].tolist(), pj[order].tolist(), strict=True):
        if j in dup:
            continue
        hit = verify_pair(views, i, j, rule)
        if hit:  # a copy of a dropped task belongs to that task's representative
            dup[j] = (dup[i][0] if i in dup else i, hit[1], hit[0])
    return dup


def near_dedupe(
    tasks: list[Task],
    threshold: float,
    num_perm: int,
    workers: int = 2,
    prompt_floor: float = 0.5,
    lsh_threshold: float = 0.3,
) -> DedupeResult:
    """Drop tasks that are verified near-duplicates of an earlier kept task."""
    res = DedupeResult()
    if not tasks:
        return res
    docs = [(t.prompt, t.reference_solution) for t in tasks]
    sig = minhash.signatures_parallel(docs, num_perm, workers=workers)
    dup = verified_near_duplicates(docs, sig, NearRule(threshold, prompt_floor, lsh_threshold))
    for i, t in enumerate(tasks):
        if i in dup:
            j, sim, basis = dup[i]
            res.dropped.append(
                {
                    "task_id": t.task_id,
                    "duplicate_of": tasks[j].task_id,
                    "kind": "near",
                    "basis": basis,
                    "similarity": round(sim, 4),
                }
            )
        else:
            res.kept.append(t)
    return res
