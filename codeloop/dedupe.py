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
    lsh = MinHashLSH(threshold=threshold, num_perm=num_perm)
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


def near_dedupe(
    tasks: list[Task], threshold: float, num_perm: int, workers: int = 2
) -> DedupeResult:
    """Drop tasks whose prompt+code MinHash matches an earlier kept task's."""
    res = DedupeResult()
    if not tasks:
        return res
    docs = [(t.prompt, t.reference_solution) for t in tasks]
    sig = minhash.signatures_parallel(docs, num_perm, workers=workers)
    dup = greedy_near_duplicates(sig, threshold, num_perm)
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
