"""Vectorised MinHash signatures of tasks, bit-compatible with datasketch's "affine32".

datasketch computes one MinHash per document in Python (~10k docs/s per core). Here a
batch of documents is tokenised once, token hashes are cached per process, k-gram
shingle hashes are combined with numpy over the whole batch, and the permutations
``fmix32(h) * a + b (mod 2^32)`` run as one (shingles x num_perm) array op with a
segmented min. The permutation parameters come from datasketch's own seeding, so a
signature equals ``datasketch.MinHash(num_perm, seed, hashfunc=int, scheme="affine32")``
fed the same shingle hashes (tests/test_data_minhash.py checks this), and the
signatures go straight into datasketch's MinHashLSH as LeanMinHash objects.

Shingles: prompt words (lowercased, ``PROMPT_K``-grams) and code tokens
(``CODE_K``-grams) with local identifiers abstracted and quote style, parentheses,
semicolons and comments dropped, so renamed variables and reformatting do not change a
signature. See `signatures` for how the two views share one signature.
"""

from __future__ import annotations

import builtins
import itertools
import keyword
import re
from collections.abc import Sequence

import numpy as np
import xxhash
from datasketch import LeanMinHash

SCHEME = "affine32"
PROMPT_K = 2
CODE_K = 3
_PROMPT_SEED, _CODE_SEED = 17, 29  # different token seeds keep the two views' shingles apart

_WORD = re.compile(r"\w+")
_COMMENT = re.compile(r"#[^\n]*")
# Identifiers first: trying string alternatives at every position costs 3x; a string
# prefix (f'..') then tokenises as a name plus a string, which is harmless here.
# Attribute names (".nlargest") are one token and keep their identity: a renamer does
# not touch library calls, and they tell heapq.nlargest from heapq.nsmallest.
_CODE_TOKEN = re.compile(
    r"\.[ \t]*[A-Za-z_]\w*|[A-Za-z_]\w*|\d[\w.]*"
    r"|'''[\s\S]*?'''|\"\"\"[\s\S]*?\"\"\"|'[^'\n]*'|\"[^\"\n]*\""
    r"|==|!=|<=|>=|\*\*|//|->|[^\s\w();]"
)
_STR_NOISE = re.compile(r"\\n|\s|'|\"")
# Names a renamer would not touch: keywords and builtins keep their identity because
# they carry the meaning (``sorted``, ``len``, ``return``); everything else is "ID".
_KEEP = frozenset(keyword.kwlist) | frozenset(dir(builtins))

_prompt_cache: dict[str, int] = {}
_code_cache: dict[str, int] = {}  # raw token -> hash of its normalised form


def _norm_code_token(tok: str) -> str:
    c = tok[0]
    if c.isalpha() or c == "_":
        return tok if tok in _KEEP else "ID"
    if c == ".":
        return "." + tok[1:].strip()
    if c in "'\"":
        # literals survive renaming; quote style and (escaped) whitespace do not
        return "S" + _STR_NOISE.sub("", tok)
    return tok


def _hashes(tokens: list[str], cache: dict[str, int], seed: int, norm) -> list[int]:
    try:
        return list(map(cache.__getitem__, tokens))  # the common case: all seen before
    except KeyError:
        if len(cache) > 1_000_000:  # bound memory on corpora with many unique literals
            cache.clear()
        for t in tokens:
            if t not in cache:
                cache[t] = xxhash.xxh32_intdigest(norm(t).encode(), seed)
        return list(map(cache.__getitem__, tokens))


def _many(texts, find, sep_tok, sep, cache, seed, norm) -> tuple[np.ndarray, np.ndarray]:
    """(token hashes of all texts in order, tokens per text) from one regex pass.

    The texts are joined by ``sep``, which tokenises to the single token ``sep_tok``,
    and the hashes are cut where it stands. Where a text itself holds the separator,
    or another token shares its hash, each text is tokenised alone.
    """
    if not texts:
        return np.zeros(0, np.uint32), np.zeros(0, np.int64)
    joined = sep.join(texts)
    if joined.count(sep_tok) == len(texts) - 1:
        h = np.fromiter(_hashes(find(joined), cache, seed, norm), np.uint32)
        cuts = np.flatnonzero(h == cache.get(sep_tok, -1))
        if len(cuts) == len(texts) - 1:
            keep = np.ones(len(h), bool)
            keep[cuts] = False
            return h[keep], np.diff(np.r_[-1, cuts, len(h)]) - 1
    toks = [_hashes(find(t), cache, seed, norm) for t in texts]
    lens = np.fromiter(map(len, toks), np.int64, len(toks))
    return np.fromiter(itertools.chain.from_iterable(toks), np.uint32, int(lens.sum())), lens


def _code_find(text: str) -> list[str]:
    return _CODE_TOKEN.findall(_COMMENT.sub("", text) if "#" in text else text)


# Lowercased prompts cannot hold an upper-case letter, so this word never occurs in one.
_PROMPT_SEP = "QSEPQ"


def prompt_batch(prompts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """(word hashes of all prompts in order, words per prompt); see `prompt_tokens`."""
    return _many([p.lower() for p in prompts], _WORD.findall, _PROMPT_SEP,
                 f" {_PROMPT_SEP} ", _prompt_cache, _PROMPT_SEED, str)  # fmt: skip


def prompt_tokens(text: str) -> list[int]:
    """Hashes of the lowercased words of a prompt."""
    return prompt_batch([text])[0].tolist()


def _tokens_whole(code: str) -> list[int]:
    return _hashes(_code_find(code), _code_cache, _CODE_SEED, _norm_code_token)


class _LineTable:
    """Token hashes of every code line seen so far, kept in one growing array.

    No token spans a newline (one-quote strings, comments, numbers and attribute
    tokens stop at it) except inside triple-quoted strings, so the tokens of a code
    without those are the concatenated tokens of its lines; a code with them is one
    unit. Lines repeat a lot across a corpus ("    return res"): a known line costs a
    dict lookup instead of a regex pass, which was most of the cost of a signature.
    """

    MAX_UNITS, MAX_TOKENS = 500_000, 1 << 24  # bound memory; the table only saves time

    def __init__(self) -> None:
        self.ids: dict[str, int] = {}
        self.buf = np.zeros(1 << 16, np.uint32)
        self.off = np.zeros(1 << 12, np.int64)
        self.len = np.zeros(1 << 12, np.int64)
        self.used = 0

    def _add(self, units: list[str]) -> None:
        new = [u for u in dict.fromkeys(units) if u not in self.ids]
        if len(self.ids) + len(new) > self.MAX_UNITS or self.used > self.MAX_TOKENS:
            self.__init__()
            new = list(dict.fromkeys(units))
        # Lines go through one regex pass together; a unit with triple quotes alone (its
        # string could run on into the next unit).
        lines = [u for u in new if "'''" not in u and '"""' not in u]
        whole = [u for u in new if "'''" in u or '"""' in u]
        new = lines + whole
        flat, lens = _many(lines, _code_find, "\x00", "\n\x00\n", _code_cache, _CODE_SEED,
                           _norm_code_token)  # fmt: skip
        if whole:
            toks = [_tokens_whole(u) for u in whole]
            extra = np.fromiter(itertools.chain.from_iterable(toks), np.uint32)
            flat = np.concatenate([flat, extra])
            lens = np.concatenate([lens, np.fromiter(map(len, toks), np.int64, len(toks))])
        n_new, base = int(lens.sum()), len(self.ids)
        while self.used + n_new > len(self.buf):
            self.buf = np.concatenate([self.buf, np.zeros_like(self.buf)])
        while base + len(new) > len(self.off):
            self.off = np.concatenate([self.off, np.zeros_like(self.off)])
            self.len = np.concatenate([self.len, np.zeros_like(self.len)])
        self.buf[self.used : self.used + n_new] = flat
        self.off[base : base + len(new)] = self.used + np.cumsum(lens) - lens
        self.len[base : base + len(new)] = lens
        self.ids.update(zip(new, range(base, base + len(new)), strict=True))
        self.used += n_new

    def tokens(self, codes: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """(all token hashes of the codes in order, number of tokens of each code)."""
        units: list[str] = []
        per_code = np.empty(len(codes), np.int64)
        for d, code in enumerate(codes):
            part = [code] if "'''" in code or '"""' in code else code.split("\n")
            units += part
            per_code[d] = len(part)
        ids = list(map(self.ids.get, units))
        if None in ids:
            self._add(units)
            ids = list(map(self.ids.__getitem__, units))
        idx = np.fromiter(ids, np.int64, len(ids))
        off, ln = self.off[idx], self.len[idx]
        total = int(ln.sum())
        pos = np.repeat(off - (np.cumsum(ln) - ln), ln) + np.arange(total)
        first = np.cumsum(per_code) - per_code
        lens = np.add.reduceat(ln, first) if len(codes) else per_code
        return self.buf[pos], lens


_LINES = _LineTable()


def code_tokens(code: str) -> list[int]:
    """Hashes of normalised code tokens (comments dropped, names/literals abstracted)."""
    return _LINES.tokens([code])[0].tolist()


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
    (perms x shingles) layout: a segmented min along the last axis is 3x faster than
    along the first, and the buffers fit in cache at this chunk size.
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
    c_h, c_seg = shingle_hashes_flat(*_LINES.tokens([c for _, c in docs]), CODE_K)
    sig_p = minhash_batch(p_h, p_seg, num_perm, seed, cols=slice(0, half))
    sig_c = minhash_batch(c_h, c_seg, num_perm, seed, cols=slice(half, num_perm))
    return np.hstack([sig_p, sig_c])


def _signatures_at(bounds: tuple[int, int], num_perm: int, seed: int) -> np.ndarray:
    return signatures(_FORK_DOCS[bounds[0] : bounds[1]], num_perm, seed)


_FORK_DOCS: Sequence[tuple[str, str]] = ()


def signatures_parallel(
    docs: Sequence[tuple[str, str]],
    num_perm: int,
    seed: int = 1,
    workers: int = 2,
    batch: int = 4000,
) -> np.ndarray:
    """`signatures` over forked worker processes; serial when small.

    Workers inherit the documents through fork, so only (start, end) pairs and the
    uint32 signatures cross the pipes.
    """
    global _FORK_DOCS
    if workers <= 1 or len(docs) <= batch:
        return signatures(docs, num_perm, seed)
    import multiprocessing as mp
    from functools import partial

    _FORK_DOCS = docs
    spans = [(i, min(i + batch, len(docs))) for i in range(0, len(docs), batch)]
    try:
        with mp.get_context("fork").Pool(workers) as pool:
            parts = pool.map(partial(_signatures_at, num_perm=num_perm, seed=seed), spans, 1)
    finally:
        _FORK_DOCS = ()
    return np.concatenate(parts)


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
