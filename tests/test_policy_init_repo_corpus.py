"""The embedded tokenizer sees repository tasks' text (codeloop.policy.agent_format.repo_corpus):
their files and the agent grammar get merges, so an episode fits the tiny context."""

from __future__ import annotations

import pytest

from codeloop.data.generator import generate_tasks
from codeloop.data.repos.expert import expert_calls
from codeloop.data.repos.store import store_files
from codeloop.data.repos.synth import generate_repo_tasks
from codeloop.policy.agent_format import CompactAgentFormat, render_compact, repo_corpus
from codeloop.policy.model import train_tokenizer


@pytest.fixture(scope="module")
def stored(tmp_path_factory):
    tasks, trees = generate_repo_tasks(12, seed=3)
    repos = tmp_path_factory.mktemp("repos")
    for files in trees.values():
        store_files(files, repos)
    return tasks, trees, repos


def test_repo_corpus_holds_each_snapshot_file_once_but_the_hidden_tests(stored):
    from codeloop.agent.workspace import hidden_files

    tasks, trees, repos = stored
    docs = [d for d in repo_corpus(tasks, repos) if not d.startswith("<|tool|>")]
    hidden = {f for t in tasks for f in hidden_files(t)}
    n_files = sum(len(set(files) - hidden) for files in trees.values())
    assert hidden and len(docs) == n_files
    assert not any(d.split("\n", 1)[0] in hidden for d in docs)


def test_repo_corpus_holds_the_expert_calls_in_the_compact_grammar(stored):
    tasks, _, repos = stored
    docs = repo_corpus(tasks, repos)
    edit = next(c for c in expert_calls(tasks[0], repos) if c["tool"] == "edit")
    assert any(render_compact(edit) in d for d in docs)


def test_repo_corpus_makes_repository_text_cheaper_to_encode(stored):
    tasks, trees, repos = stored
    funcs = generate_tasks(40, seed=0)
    plain = CompactAgentFormat(train_tokenizer(funcs, 600))
    seen = CompactAgentFormat(train_tokenizer(funcs + tasks, 600, repo_corpus(tasks, repos)))
    text = "\n".join(next(iter(trees.values())).values())
    assert len(seen.encode(text)) < 0.8 * len(plain.encode(text))
