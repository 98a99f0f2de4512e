"""Token hashes of prompts and code, the input of codeloop.data.minhash's shingles.

Prompts: lowercased words. Code: tokens with local identifiers abstracted to "ID" and
quote style, parentheses, semicolons and comments dropped, so renamed variables and
reformatting do not change them. Both are computed per batch with as little Python per
document as possible: one regex pass over all prompts, and code cut into lines that are
looked up in a per-process table (see `_LineTable`), so only new lines meet the regex.
"""

from __future__ import annotations

import builtins
import itertools
import keyword
import re
from collections.abc import Sequence

import numpy as np
import xxhash

_PROMPT_SEED, _CODE_SEED = 17, 29  # different token seeds keep the two views' shingles apart

_WORD = re.compile(r"\w+")
_COMMENT = re.compile(r"#[^\n]*")
# Identifiers first: trying string alternatives at every position costs far more; a string
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
        for t in set(tokens).difference(cache):  # set ops in C: batches are long
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
                 f" {_PROMPT_SEP} ", _prompt_cache, _PROMPT_SEED, str)


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
    unit. Lines repeat a lot across a corpus ("    return res"), so a batch is cut into
    units and each unit hashed in numpy (64-bit over its bytes and length: a collision
    among a million distinct lines has odds ~1e-8); only units not seen before go
    through the regex, which was most of the cost of a signature.
    """

    MAX_UNITS, MAX_TOKENS = 500_000, 1 << 24  # bound memory; the table only saves time

    def __init__(self) -> None:
        self.keys = np.zeros(0, np.uint64)  # sorted unit hashes, and their unit ids
        self.kid = np.zeros(0, np.int64)
        self.buf = np.zeros(1 << 16, np.uint32)
        self.off = np.zeros(1 << 12, np.int64)
        self.len = np.zeros(1 << 12, np.int64)
        self.used = 0

    def _add(self, keys: np.ndarray, units: list[str]) -> None:
        # Lines go through one regex pass together; a unit with triple quotes alone (its
        # string could run on into the next unit).
        whole = np.fromiter((("'''" in u or '"""' in u) for u in units), bool, len(units))
        order = np.r_[np.flatnonzero(~whole), np.flatnonzero(whole)]
        lines = [units[k] for k in order[: len(units) - int(whole.sum())]]
        flat, lens = _many(lines, _code_find, "\x00", "\n\x00\n", _code_cache, _CODE_SEED,
                           _norm_code_token)
        if whole.any():
            toks = [_tokens_whole(units[k]) for k in np.flatnonzero(whole)]
            extra = np.fromiter(itertools.chain.from_iterable(toks), np.uint32)
            flat = np.concatenate([flat, extra])
            lens = np.concatenate([lens, np.fromiter(map(len, toks), np.int64, len(toks))])
        n_new, base, m = int(lens.sum()), len(self.keys), len(units)
        while self.used + n_new > len(self.buf):
            self.buf = np.concatenate([self.buf, np.zeros_like(self.buf)])
        while base + m > len(self.off):
            self.off = np.concatenate([self.off, np.zeros_like(self.off)])
            self.len = np.concatenate([self.len, np.zeros_like(self.len)])
        self.buf[self.used : self.used + n_new] = flat
        self.off[base : base + m] = self.used + np.cumsum(lens) - lens
        self.len[base : base + m] = lens
        self.used += n_new
        keys = np.concatenate([self.keys, keys[order]])
        kid = np.concatenate([self.kid, np.arange(base, base + m)])
        srt = np.argsort(keys, kind="stable")
        self.keys, self.kid = keys[srt], kid[srt]

    def _find(self, keys: np.ndarray) -> np.ndarray:
        at = np.minimum(np.searchsorted(self.keys, keys), max(len(self.keys) - 1, 0))
        if not len(self.keys):
            return np.full(len(keys), -1)
        return np.where(self.keys[at] == keys, self.kid[at], -1)

    def tokens(self, codes: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """(all token hashes of the codes in order, number of tokens of each code)."""
        n = len(codes)
        if not n:
            return np.zeros(0, np.uint32), np.zeros(0, np.int64)
        text = "\n".join(codes) + "\n"
        raw = text.encode("utf-8", "surrogatepass")
        if len(raw) == len(text):
            dlen = np.fromiter(map(len, codes), np.int64, n)
        else:
            dlen = np.fromiter(
                (len(c.encode("utf-8", "surrogatepass")) for c in codes), np.int64, n
            )  # noqa: E501
        starts, ends, doc = _units(np.frombuffer(raw, np.uint8), dlen)
        keys = _unit_hashes(np.frombuffer(raw, np.uint8), starts, ends)
        uk, first, inv = np.unique(keys, return_index=True, return_inverse=True)
        uid = self._find(uk)
        miss = np.flatnonzero(uid < 0)
        if len(miss):
            if len(self.keys) + len(miss) > self.MAX_UNITS or self.used > self.MAX_TOKENS:
                self.__init__()
                miss = np.arange(len(uk))
            texts = [raw[starts[k] : ends[k] - 1].decode("utf-8", "surrogatepass")
                     for k in first[miss].tolist()]
            self._add(uk[miss], texts)
            uid = self._find(uk)
        idx = uid[inv]
        off, ln = self.off[idx], self.len[idx]
        pos = np.repeat(off - (np.cumsum(ln) - ln), ln) + np.arange(int(ln.sum()))
        per_code = np.bincount(doc, minlength=n)
        lens = np.add.reduceat(ln, np.cumsum(per_code) - per_code)
        return self.buf[pos], lens


def _units(b: np.ndarray, dlen: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Byte spans [start, end) of the units of "\\n"-joined codes (each span ends with its
    newline) and the code each belongs to. A code holding triple quotes is one unit."""
    dstart = np.cumsum(dlen + 1) - (dlen + 1)
    nl = np.flatnonzero(b == 10)
    q = (b[:-2] == b[1:-1]) & (b[1:-1] == b[2:]) & ((b[:-2] == 39) | (b[:-2] == 34))
    tq = np.flatnonzero(q)
    if len(tq):
        flagged = np.zeros(len(dlen), bool)
        flagged[np.searchsorted(dstart, tq, "right") - 1] = True
        d = np.searchsorted(dstart, nl, "right") - 1
        nl = nl[(nl == dstart[d] + dlen[d]) | ~flagged[d]]
    ends = nl + 1
    starts = np.r_[0, ends[:-1]]
    return starts, ends, np.searchsorted(dstart, starts, "right") - 1


_BYTE_MIX = np.random.default_rng(0x5EED).integers(0, 2**64, 256, np.uint64, endpoint=False)
_POS_MIX = np.zeros(0, np.uint64)


def _unit_hashes(b: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """64-bit hash of each byte span: sum of random byte values times random odd position
    weights, mixed with the length."""
    global _POS_MIX
    seglen = ends - starts
    if int(seglen.max()) > len(_POS_MIX):
        rng = np.random.default_rng(0xB0B)
        _POS_MIX = rng.integers(0, 2**64, int(seglen.max()) * 2, np.uint64) | np.uint64(1)
    rel = np.arange(len(b)) - np.repeat(starts, seglen)
    h = np.add.reduceat(_BYTE_MIX[b] * _POS_MIX[rel], starts)
    return _fmix64(h ^ (seglen.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)))


def _fmix64(h: np.ndarray) -> np.ndarray:
    h = (h ^ (h >> np.uint64(33))) * np.uint64(0xFF51AFD7ED558CCD)
    h = (h ^ (h >> np.uint64(33))) * np.uint64(0xC4CEB9FE1A85EC53)
    return h ^ (h >> np.uint64(33))


LINE_TABLE = _LineTable()


def code_tokens(code: str) -> list[int]:
    """Hashes of normalised code tokens (comments dropped, names/literals abstracted)."""
    return LINE_TABLE.tokens([code])[0].tolist()
