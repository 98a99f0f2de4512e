"""Vectorised MinHash signatures of tasks, bit-compatible with datasketch's "affine32".

datasketch computes one MinHash per document in Python, one loop per document. Here a
batch of documents is tokenised once, token hashes are cached per process, k-gram
shingle hashes are combined with numpy over the whole batch, and the permutations
``fmix32(h) * a + b (mod 2^32)`` run as one (shingles x num_perm) array op with a
segmented min. The permutation parameters come from datasketch's own seeding, so a
signature equals ``datasketch.MinHash(num_perm, seed, hashfunc=int, scheme="affine32")``
fed the same shingle hashes (tests/test_clean_minhash.py checks this), and the
signatures go straight into datasketch's MinHashLSH as LeanMinHash objects.

Shingles: prompt words (lowercased, ``PROMPT_K``-grams) and code tokens
(``CODE_K``-grams) with local identifiers abstracted and quote style, parentheses,
semicolons and comments dropped (codeloop.data.tokens), so renamed variables and
reformatting do not change a signature. See `signatures` for how the two views share
one signature.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np
from datasketch import LeanMinHash

from codeloop.data.tokens import LINE_TABLE, code_tokens, prompt_batch, prompt_tokens  # noqa: F401

SCHEME = "affine32"
PROMPT_K = 2
CODE_K = 3


def permutations(num_perm: int, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """datasketch's affine32 permutation parameters (a odd, b) for this seed."""
    gen = np.random.RandomState(seed)
    a = gen.randint(0, 1 << 31, num_perm, dtype=np.uint32) * np.uint32(2) + np.uint32(1)
    b = gen.randint(0, 1 << 32, num_perm, dtype=np.uint32)
    return a, b


def _fmix32(h: np.ndarray) -> np.ndarray:
    h = h ^ (h >> np.uint32(16))
    h = h * np.uint32(0x85EBCA6B)
    h = h ^ (h >> np.uint32(13))
    h = h * np.uint32(0xC2B2AE35)
    return h ^ (h >> np.uint32(16))


def shingle_hashes(token_lists: Sequence[list[int]], k: int) -> tuple[np.ndarray, np.ndarray]:
    """All k-gram hashes of a batch and the start offset of each document's segment.

    A document shorter than k gives one shingle of all its tokens; an empty one gives
    a single shingle of a sentinel token, so every segment is non-empty.
    """
    lens = np.fromiter(map(len, token_lists), np.int64, len(token_lists))
    flat = np.fromiter(itertools.chain.from_iterable(token_lists), np.uint32, int(lens.sum()))
    return shingle_hashes_flat(flat, lens, k)


def shingle_hashes_flat(
    flat: np.ndarray, lens: np.ndarray, k: int
) -> tuple[np.ndarray, np.ndarray]:
    """`shingle_hashes` of documents given as one token array and per-document lengths."""
    n_tok = len(flat)
    seq_len = np.maximum(lens, 1) + (k - 1)  # an empty document is one sentinel token 0
    n_sh = np.maximum(lens - k + 1, 1)
    arr = np.zeros(int(seq_len.sum()), dtype=np.uint32)
    starts = np.concatenate(([0], np.cumsum(seq_len)[:-1]))
    arr[
        np.repeat(starts - np.concatenate(([0], np.cumsum(lens)[:-1])), lens) + np.arange(n_tok)
    ] = flat
    doc_start = starts
    seg_start = np.concatenate(([0], np.cumsum(n_sh)[:-1]))
    # positions of every shingle's first token: doc_start[d] + 0..n_sh[d]-1
    pos = np.repeat(doc_start - seg_start, n_sh) + np.arange(int(n_sh.sum()))
    h = arr[pos]
    for j in range(1, k):
        h = _fmix32(h * np.uint32(0x9E3779B1) ^ arr[pos + j])
    return h, seg_start


def minhash_batch(
    hashes: np.ndarray,
    seg_start: np.ndarray,
    num_perm: int,
    seed: int = 1,
    chunk: int = 8192,
    cols: slice = slice(None),
) -> np.ndarray:
    """Signatures (n_docs x perms, uint32) of segmented shingle hashes.

    ``cols`` selects which of the num_perm permutations to apply. Works in the
    (perms x shingles) layout: a segmented min along the last (contiguous) axis is
    faster than along the first, and the buffers fit in cache at this chunk size.
    """
    a, b = permutations(num_perm, seed)
    a, b = a[cols, None], b[cols, None]
    n_perm = len(a)
    mixed = _fmix32(hashes.astype(np.uint32, copy=False))
    n_docs = len(seg_start)
    out = np.empty((n_perm, n_docs), dtype=np.uint32)
    bounds = np.append(seg_start, len(mixed))
    buf = np.empty((n_perm, chunk), dtype=np.uint32)
    d = 0
    while d < n_docs:  # whole documents per chunk so reduceat never splits a segment
        e = int(np.searchsorted(bounds, bounds[d] + chunk, side="right")) - 1
        e = min(max(e, d + 1), n_docs)
        lo, hi = bounds[d], bounds[e]
        view = buf[:, : hi - lo] if hi - lo <= chunk else np.empty((n_perm, hi - lo), np.uint32)
        np.multiply(a, mixed[None, lo:hi], out=view)
        np.add(view, b, out=view)
        out[:, d:e] = np.minimum.reduceat(view, seg_start[d:e] - lo, axis=1)
        d = e
    return np.ascontiguousarray(out.T)


def signatures(docs: Sequence[tuple[str, str]], num_perm: int, seed: int = 1) -> np.ndarray:
    """Signatures (n x num_perm) of ``(prompt, code)`` documents.

    The first half of the columns is the prompt's MinHash, the second half the code's
    (disjoint permutations), so the share of equal columns estimates the *mean* of the
    prompt and code Jaccards. A plain union of shingles let long code drown the prompt;
    the mean weighs "same task, edited prompt" and "same prompt, reformatted code"
    alike. `view_jaccard` reads each half on its own.
    """
    half = num_perm // 2
    p_h, p_seg = shingle_hashes_flat(*prompt_batch([p for p, _ in docs]), PROMPT_K)
    c_h, c_seg = shingle_hashes_flat(*LINE_TABLE.tokens([c for _, c in docs]), CODE_K)
    sig_p = minhash_batch(p_h, p_seg, num_perm, seed, cols=slice(0, half))
    sig_c = minhash_batch(c_h, c_seg, num_perm, seed, cols=slice(half, num_perm))
    return np.hstack([sig_p, sig_c])


def _signatures_at(bounds: tuple[int, int], num_perm: int, seed: int) -> None:
    _FORK_OUT[bounds[0] : bounds[1]] = signatures(_FORK_DOCS[bounds[0] : bounds[1]], num_perm, seed)


_FORK_DOCS: Sequence[tuple[str, str]] = ()
_FORK_OUT = np.zeros((0, 0), np.uint32)


def signatures_parallel(
    docs: Sequence[tuple[str, str]],
    num_perm: int,
    seed: int = 1,
    workers: int = 2,
    batch: int = 4000,
) -> np.ndarray:
    """`signatures` over forked worker processes; serial when small.

    Workers inherit the documents through fork and write their rows straight into a
    shared anonymous mapping, so only (start, end) pairs cross the pipes.
    """
    global _FORK_DOCS, _FORK_OUT
    if workers <= 1 or len(docs) <= batch:
        return signatures(docs, num_perm, seed)
    import mmap
    import multiprocessing as mp
    from functools import partial

    shared = mmap.mmap(-1, len(docs) * num_perm * 4)  # MAP_SHARED: children's writes show
    _FORK_DOCS = docs
    _FORK_OUT = np.frombuffer(shared, np.uint32).reshape(len(docs), num_perm)
    spans = [(i, min(i + batch, len(docs))) for i in range(0, len(docs), batch)]
    try:
        with mp.get_context("fork").Pool(workers) as pool:
            pool.map(partial(_signatures_at, num_perm=num_perm, seed=seed), spans, 1)
        return _FORK_OUT.copy()
    finally:
        _FORK_DOCS, _FORK_OUT = (), np.zeros((0, 0), np.uint32)
        shared.close()


def view_jaccard(sig_a: np.ndarray, sig_b: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(mean, prompt, code) Jaccard estimates between matching rows of two signature arrays."""
    eq = sig_a == sig_b
    half = sig_a.shape[-1] // 2
    return eq.mean(axis=-1), eq[..., :half].mean(axis=-1), eq[..., half:].mean(axis=-1)


def lean(sig_row: np.ndarray, seed: int = 1) -> LeanMinHash:
    """Wrap one signature row as a datasketch LeanMinHash (for MinHashLSH)."""
    m = object.__new__(LeanMinHash)
    m.seed, m.scheme, m.hashvalues = seed, SCHEME, sig_row
    return m
