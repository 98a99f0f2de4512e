"""The optional LLM judge over plain HTTP, against a local OpenAI-compatible server."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from codeloop.config import RewardConfig
from codeloop.rewards.extras import build_extras
from codeloop.rewards.llm_judge import HttpJudge, JudgeError, parse_score
from tests._rewards_fixtures import ADD_TASK, GOOD


class _Handler(BaseHTTPRequestHandler):
    reply = "7"
    seen: list[dict] = []

    def do_POST(self):  # noqa: N802 (http.server's name)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        _Handler.seen.append({"path": self.path, "auth": self.headers.get("Authorization"), **body})
        out = json.dumps(
            {"choices": [{"message": {"role": "assistant", "content": _Handler.reply}}]}
        )
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(out.encode())

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def server():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    th = threading.Thread(target=srv.serve_forever, daemon=True)
    th.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/v1"
    srv.shutdown()


def test_the_judge_scales_a_0_to_10_reply_to_0_to_1(server):
    _Handler.reply = "7"
    assert HttpJudge(server, "judge-model").score(ADD_TASK, GOOD) == 0.7


def test_the_judge_posts_to_chat_completions_with_the_model_and_key(server, monkeypatch):
    monkeypatch.setenv("JUDGE_KEY", "sk-test")
    _Handler.seen.clear()
    HttpJudge(server, "judge-model", api_key_env="JUDGE_KEY").score(ADD_TASK, GOOD)
    req = _Handler.seen[-1]
    assert (req["path"], req["model"], req["auth"]) == (
        "/v1/chat/completions",
        "judge-model",
        "Bearer sk-test",
    )


def test_the_judge_never_sees_hidden_tests(server):
    _Handler.seen.clear()
    HttpJudge(server, "m").score(ADD_TASK, GOOD)
    prompt = json.dumps(_Handler.seen[-1]["messages"])
    assert all(t not in prompt for t in ADD_TASK.hidden_tests)


def test_a_reply_without_a_number_is_a_judge_error(server):
    _Handler.reply = "looks fine to me"
    with pytest.raises(JudgeError, match="no score"):
        HttpJudge(server, "m").score(ADD_TASK, GOOD)


def test_an_out_of_range_score_is_a_judge_error():
    with pytest.raises(JudgeError, match="outside"):
        parse_score("42")


def test_an_unreachable_endpoint_is_a_judge_error():
    with pytest.raises(JudgeError, match="failed"):
        HttpJudge("http://127.0.0.1:9/v1", "m", timeout_s=1).score(ADD_TASK, GOOD)


def test_default_params_build_no_judge_and_no_critic():
    assert build_extras(RewardConfig()) == {"judge": None, "critic": None}


def test_a_judge_version_without_a_url_is_refused():
    with pytest.raises(JudgeError, match="judge_url"):
        build_extras(RewardConfig(version="v2-judge"))
