"""Learned critic, CodeRL style: predicts the pass probability of (task, code).

Trained on scored trajectories (label: all visible tests passed), used two ways (seed
004): as a dense reward (version ``v2-critic``) and for critic-guided sampling at
inference (``rerank`` orders candidates; ``sample`` draws one with softmax weights, the
article's "critical sampling").

Departure from CodeRL: CodeRL's critic is a fine-tuned CodeT5 that also predicts the
error kind per token. Offline on two CPU cores we use logistic regression over hashed
features of the code (token uni/bigrams) and of the task-code pair (task words that
appear as code identifiers, entry point defined, returns a value, size buckets). It is
small, deterministic and trains in seconds; a transformer critic can replace it behind
the same ``predict``/``rerank`` interface.
"""

from __future__ import annotations

import ast
import hashlib
import io
import json
import keyword
import math
import re
import tokenize
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from codeloop.schema import Task, Trajectory

_WORD = re.compile(r"[A-Za-z_]+")
_NUM = re.compile(r"\b\d+\b")


def _h(s: str, dim: int) -> int:
    return int.from_bytes(hashlib.blake2b(s.encode(), digest_size=8).digest(), "little") % dim


def _code_tokens(code: str) -> list[str]:
    try:
        toks = tokenize.generate_tokens(io.StringIO(code).readline)
        return [
            t.string
            for t in toks
            if t.type in (tokenize.NAME, tokenize.OP, tokenize.NUMBER) and t.string.strip()
        ]
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return code.split()


def _structure(task: Task, code: str) -> list[str]:
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError):
        return ["syntax_error"]
    fns = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]
    feats = ["parses", f"n_fn:{min(len(fns), 3)}"]
    if any(f.name == task.entry_point for f in fns):
        feats.append("entry_defined")
    if any(isinstance(n, ast.Return) and n.value is not None for n in ast.walk(tree)):
        feats.append("returns")
    lines = len([ln for ln in code.splitlines() if ln.strip()])
    feats.append(f"lines:{min(int(math.log2(lines + 1)), 6)}")
    return feats


def _pair_features(task: Task, toks: list[str]) -> list[str]:
    """Task-conditional features: prompt words x code operators/keywords, numbers shared.

    Why: a code-only model cannot tell ``* 6`` from ``* 7``; the pair ("multiplies", "*")
    and "every number of the prompt appears in the code" can.
    """
    words = sorted({w.lower() for w in _WORD.findall(task.prompt) if len(w) > 2})[:40]
    ops = sorted(
        {t for t in toks if not t.isidentifier() or keyword.iskeyword(t)} - {"(", ")", ":", ","}
    )
    names = [f"x:{w}|{o}" for w in words for o in ops if not o[0].isdigit()]
    p_nums, c_nums = set(_NUM.findall(task.prompt)), {t for t in toks if t[:1].isdigit()}
    if p_nums:
        names.append(f"num_cov:{int(4 * len(p_nums & c_nums) / len(p_nums))}")
    names.append(f"num_extra:{min(len(c_nums - p_nums), 3)}")
    return names


def features(task: Task, code: str, dim: int) -> np.ndarray:
    """Sorted unique hashed feature indices of (task, code)."""
    toks = _code_tokens(code)
    names = [f"u:{t}" for t in toks] + [f"b:{a} {b}" for a, b in zip(toks, toks[1:], strict=False)]
    idents = {t.lower() for t in toks if t.isidentifier()}
    task_words = {w.lower() for w in _WORD.findall(task.prompt) if len(w) > 2}
    overlap = len(task_words & idents) / (len(task_words) or 1)
    names += [f"overlap:{min(int(overlap * 10), 10)}", "bias"]
    names += [f"s:{s}" for s in _structure(task, code)]
    names += _pair_features(task, toks)
    return np.unique(np.array([_h(n, dim) for n in names], dtype=np.int64))


def _log_odds(y: np.ndarray) -> float:
    """log(p / (1 - p)) of the labels' mean, smoothed so one class alone stays finite."""
    p = (float(y.sum()) + 0.5) / (len(y) + 1.0)
    return math.log(p / (1.0 - p))


@dataclass
class Critic:
    weights: np.ndarray
    dim: int

    @classmethod
    def fit(
        cls,
        examples: list[tuple[Task, str, float]],
        *,
        dim: int = 1 << 16,
        epochs: int = 60,
        lr: float = 0.5,
        l2: float = 1e-4,
    ) -> Critic:
        """Logistic regression by full-batch gradient descent on (task, code, label), the
        bias started at the labels' log-odds."""
        feats = [features(t, c, dim) for t, c, _ in examples]
        y = np.array([lab for _, _, lab in examples], dtype=np.float64)
        rows = np.concatenate([np.full(len(f), i) for i, f in enumerate(feats)] or [[]])
        cols = np.concatenate(feats or [np.zeros(0, np.int64)]).astype(np.int64)
        rows = rows.astype(np.int64)
        w = np.zeros(dim)
        # The bias starts at the labels' log-odds. From zero, every feature most rows share
        # ("def", "return", "parses") learns the base rate along with the bias, so a row's
        # score falls (mostly failing labels) or rises (mostly passing) with how many such
        # features it has, i.e. with its length: on a mostly failing night, complete code
        # that passes then ranks below short failing code of other tasks.
        w[_h("bias", dim)] = _log_odds(y)
        n = max(len(examples), 1)
        for _ in range(epochs):
            z = np.bincount(rows, weights=w[cols], minlength=len(examples))
            p = 1.0 / (1.0 + np.exp(-z))
            grad = np.bincount(cols, weights=(p - y)[rows], minlength=dim) / n
            w -= lr * (grad + l2 * w)
        return cls(w, dim)

    def predict(self, task: Task, code: str) -> float:
        """Predicted probability that ``code`` passes ``task``'s tests."""
        z = float(self.weights[features(task, code, self.dim)].sum())
        return 1.0 / (1.0 + math.exp(-max(min(z, 50.0), -50.0)))

    def rerank(self, task: Task, candidates: list[str]) -> list[int]:
        """Candidate indices, most likely to pass first (ties keep sampling order)."""
        scores = [self.predict(task, c) for c in candidates]
        return sorted(range(len(candidates)), key=lambda i: (-scores[i], i))

    def sample(self, task: Task, candidates: list[str], *, temperature: float, rng) -> int:
        """Critic-guided sampling: draw an index with softmax(score / temperature) weights."""
        s = np.array([self.predict(task, c) for c in candidates]) / max(temperature, 1e-6)
        p = np.exp(s - s.max())
        return int(rng.choice(len(candidates), p=p / p.sum()))

    def save(self, path: str | Path) -> None:
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        nz = np.nonzero(self.weights)[0]
        np.savez(path / "critic.npz", idx=nz, val=self.weights[nz])
        (path / "critic.json").write_text(json.dumps({"dim": self.dim, "kind": "hashed-lr"}))

    @classmethod
    def load(cls, path: str | Path) -> Critic:
        path = Path(path)
        if not (path / "critic.json").exists():
            raise FileNotFoundError(f"no critic at {path} (expected critic.json + critic.npz)")
        dim = json.loads((path / "critic.json").read_text())["dim"]
        data = np.load(path / "critic.npz")
        w = np.zeros(dim)
        w[data["idx"]] = data["val"]
        return cls(w, dim)


def labelled_examples(
    trajs: list[Trajectory], tasks_by_id: dict[str, Task]
) -> list[tuple[Task, str, float]]:
    """(task, final code, label) per scored trajectory; label = binary pass on visible tests.

    Trajectories with an infra_error or an unknown task carry no label and are skipped.
    """
    return [
        (tasks_by_id[t.task_id], t.final_code, float(t.reward_components["binary_pass"]))
        for t in trajs
        if not unlabelled_reason(t, tasks_by_id)
    ]


def unlabelled_reason(t: Trajectory, tasks_by_id: dict[str, Task]) -> str:
    """Why a row carries no critic label ("" when it does): one rule for fit and count."""
    if t.infra_error:
        return "infra_error"
    if t.task_id not in tasks_by_id:
        return "unknown_task"
    return "" if "binary_pass" in t.reward_components else "unscored"


def train_critic(trajs: list[Trajectory], tasks_by_id: dict[str, Task], **kw) -> Critic:
    """Fit a critic on every labelled scored trajectory."""
    examples = labelled_examples(trajs, tasks_by_id)
    if not examples:
        raise ValueError("no scored trajectories to train the critic on")
    return Critic.fit(examples, **kw)


def roc_auc(scores: list[float], labels: list[int | float]) -> float | None:
    """ROC AUC by the rank-sum formula (ties count half); None when a class is missing."""
    y = np.asarray(labels, dtype=bool)
    n_pos, n_neg = int(y.sum()), int((~y).sum())
    if not n_pos or not n_neg:
        return None
    s = np.asarray(scores, dtype=np.float64)
    # average rank of each distinct score (ties share it): 1-based ranks lo+1..hi
    _, inverse, counts = np.unique(s, return_inverse=True, return_counts=True)
    hi = np.cumsum(counts)
    ranks = ((hi - counts + 1 + hi) / 2.0)[inverse]
    return float((ranks[y].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def in_holdout(task_id: str, fraction: float, seed: int) -> bool:
    """Deterministic split by task (never by row), so held-out tasks are unseen in training."""
    h = hashlib.blake2b(f"{seed}:{task_id}".encode(), digest_size=8).digest()
    return int.from_bytes(h, "little") / 2**64 < fraction


# A held-out figure is only reported when each class (passing, failing) has at least
# this many held-out rows from at least this many held-out tasks. Why per task too: the
# split is by task and a task's samples share its prompt, so the rows of one class drawn
# from one or two tasks rank those tasks against the others, not passing code against
# failing code; and with a handful of minority rows the AUC moves in steps of
# 1 / (minority x majority) and the accuracy is the majority share whatever the critic does.
MIN_HOLDOUT_ROWS_PER_CLASS = 10
MIN_HOLDOUT_TASKS_PER_CLASS = 3


def holdout_status(held: list[tuple[Task, str, float]]) -> str:
    """The held-out rows' status: "ok", or "degenerate: <why>" when they cannot carry an
    AUC or an accuracy."""
    why = []
    for name, label in (("passing", True), ("failing", False)):
        rows = [e for e in held if bool(e[2]) is label]
        n_tasks = len({e[0].task_id for e in rows})
        if len(rows) < MIN_HOLDOUT_ROWS_PER_CLASS or n_tasks < MIN_HOLDOUT_TASKS_PER_CLASS:
            why.append(f"{len(rows)} {name} rows from {n_tasks} tasks")
    if not why:
        return "ok"
    need = f"{MIN_HOLDOUT_ROWS_PER_CLASS} rows from {MIN_HOLDOUT_TASKS_PER_CLASS} tasks"
    return f"degenerate: {' and '.join(why)} held out (each class needs {need})"


def fit_with_holdout(
    examples: list[tuple[Task, str, float]], *, holdout_fraction: float, seed: int, **kw
) -> tuple[Critic, dict]:
    """Measure on held-out tasks, then refit on everything (the model the stage ships).

    Why refit: the held-out figure estimates how well a critic trained this way ranks code
    for unseen tasks; the shipped critic should still learn from every labelled row. On a
    degenerate held-out split (``holdout_status``) no figure is computed: AUC and accuracy
    stay None and ``holdout_status`` says why.
    """
    held = [e for e in examples if in_holdout(e[0].task_id, holdout_fraction, seed)]
    train = [e for e in examples if not in_holdout(e[0].task_id, holdout_fraction, seed)]
    status = holdout_status(held)
    if status == "ok" and not train:
        status = "degenerate: no training rows outside the held-out tasks"
    metrics: dict = {
        "n_examples": len(examples),
        "n_train": len(train),
        "n_holdout": len(held),
        "n_holdout_passing": sum(bool(e[2]) for e in held),
        "pass_rate": sum(e[2] for e in examples) / len(examples) if examples else None,
        "holdout_status": status,
        "holdout_auc": None,
        "holdout_accuracy": None,
    }
    if status == "ok":
        probe = Critic.fit(train, **kw)
        scores = [probe.predict(t, c) for t, c, _ in held]
        labels = [y for _, _, y in held]
        metrics["holdout_auc"] = roc_auc(scores, labels)
        hits = sum((s >= 0.5) == bool(y) for s, y in zip(scores, labels, strict=True))
        metrics["holdout_accuracy"] = hits / len(held)
    return Critic.fit(examples, **kw), metrics


def skipped_reasons(trajs: list[Trajectory], tasks_by_id: dict[str, Task]) -> dict[str, int]:
    """Why rows carry no label (counted, so nothing is dropped silently)."""
    out: dict[str, int] = {}
    for t in trajs:
        why = unlabelled_reason(t, tasks_by_id)
        if why:
            out[why] = out.get(why, 0) + 1
    return out


def fit_critic(
    trajs: list[Trajectory], tasks_by_id: dict[str, Task], cfg, holdout_fraction=None
) -> tuple[Critic, dict]:
    """The critic stage and `codeloop critic`: fit with params' ``critic`` section (a
    CriticConfig); metrics also count the unlabelled rows by reason. Raises ValueError
    when no row carries a label."""
    examples = labelled_examples(trajs, tasks_by_id)
    skipped = skipped_reasons(trajs, tasks_by_id)
    if not examples:
        raise ValueError(
            f"no scored trajectory carries a binary_pass label for a known task "
            f"({len(trajs)} rows; skipped {skipped or 'none'})"
        )
    critic, metrics = fit_with_holdout(
        examples,
        holdout_fraction=cfg.holdout_fraction if holdout_fraction is None else holdout_fraction,
        seed=cfg.seed, dim=1 << cfg.dim_bits, epochs=cfg.epochs, lr=cfg.lr, l2=cfg.l2,
    )
    metrics["skipped"] = skipped
    return critic, metrics


_INT = re.compile(r"(?<![\w.])(\d+)(?![\w.])")
_OP_SWAPS = ((" * ", " + "), (" + ", " - "), (" - ", " + "), ("[:", "[1:"), ("[::-1]", ""))


def mutants(reference: str) -> list[str]:
    """Plausible wrong variants of a reference solution (off-by-one constant, swapped
    operator, dropped line, identity, constant return, broken syntax).

    Why: before any rollout exists a critic can be bootstrapped on reference solutions and
    their mutants, and benchmarks need candidates of mixed quality. Labels still come from
    the sandbox: a mutant that happens to pass is labelled as passing.
    """
    lines = reference.rstrip("\n").splitlines()
    if not lines or not lines[0].startswith("def "):
        return []
    head, body = lines[0], lines[1:]
    arg = head[head.index("(") + 1 : head.index(")")].split(",")[0].strip() or "None"
    out = []
    text = "\n".join(body)
    m = _INT.search(text)
    if m:
        bumped = text[: m.start()] + str(int(m.group()) + 1) + text[m.end() :]
        out.append("\n".join([head, bumped]))
    for a, b in _OP_SWAPS:
        if a in text:
            out.append("\n".join([head, text.replace(a, b, 1)]))
            break
    if len(body) > 2:
        out.append("\n".join([head, *body[:-2], body[-1]]))
    out.append(f"{head}\n    return {arg}")
    out.append(f"{head}\n    return 0")
    out.append("\n".join([head.rstrip(":"), *body]))
    return [c + "\n" for c in dict.fromkeys(out) if c + "\n" != reference]
