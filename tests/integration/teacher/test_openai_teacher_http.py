"""The OpenAI-compatible teacher against a real local HTTP server (stdlib, 127.0.0.1, port 0).

The server speaks ``POST /v1/chat/completions``; the candidate text carries a ``MODE=...`` marker that picks its
behaviour: a normal answer, a slow one (beyond the client timeout), 500s then success, 429 then success,
malformed JSON, a dropped connection, a 400. Short timeouts keep every test to about a second.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import socket
import threading
import time
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from verl_ext.augment.config import TeacherConfig
from verl_ext.augment.parser import Candidate
from verl_ext.augment.teacher import OpenAITeacher, TeacherError
from verl_ext.augment.validator import AsyncValidator

_MODE_RE = re.compile(r"MODE=(\w+)")
GOOD = {"clean": "What is 2 + 2?", "solvable": True, "answer": "4", "difficulty": 1.1}


class ChatServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.lock = threading.Lock()
        self.hits: Counter[str] = Counter()
        self.bodies: list[dict] = []
        self.headers_seen: list[dict] = []
        self.active = 0
        self.max_active = 0
        self.slow_s = 1.0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"


class _Handler(BaseHTTPRequestHandler):
    server: ChatServer

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - silence the default stderr log
        return

    def finish(self) -> None:
        with contextlib.suppress(OSError):  # the client (or the 'drop' mode) already closed the socket
            super().finish()

    def _reply(self, status: int, payload: bytes) -> None:
        with contextlib.suppress(OSError):  # a timed-out client hung up
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

    def _chat(self, content: str) -> bytes:
        return json.dumps({"id": "x", "object": "chat.completion",
                           "choices": [{"index": 0, "message": {"role": "assistant", "content": content}}]}).encode()

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        srv = self.server
        mode_match = _MODE_RE.search(body["messages"][-1]["content"])
        mode = mode_match.group(1) if mode_match else "ok"
        key = body["messages"][-1]["content"]
        with srv.lock:
            srv.hits[key] += 1
            hit = srv.hits[key]
            srv.bodies.append(body)
            srv.headers_seen.append(dict(self.headers))
            srv.active += 1
            srv.max_active = max(srv.max_active, srv.active)
        try:
            self._serve_mode(mode, hit)
        finally:
            with srv.lock:
                srv.active -= 1

    def _serve_mode(self, mode: str, hit: int) -> None:
        if mode == "ok":
            self._reply(200, self._chat(json.dumps(GOOD)))
        elif mode == "hold":
            time.sleep(0.1)
            self._reply(200, self._chat(json.dumps(GOOD)))
        elif mode == "fenced":
            self._reply(200, self._chat("Sure.\n```json\n" + json.dumps(GOOD) + "\n```"))
        elif mode == "slow":
            time.sleep(self.server.slow_s)
            self._reply(200, self._chat(json.dumps(GOOD)))
        elif mode == "flaky":  # two 500s, then an answer
            self._reply(500, b'{"error": "overloaded"}') if hit <= 2 else self._reply(200, self._chat(json.dumps(GOOD)))
        elif mode == "ratelimited":
            self._reply(429, b"{}") if hit == 1 else self._reply(200, self._chat(json.dumps(GOOD)))
        elif mode == "malformed":
            self._reply(200, self._chat("I think it is solvable, answer four"))
        elif mode == "notchat":
            self._reply(200, b'{"unexpected": true}')
        elif mode == "bad":
            self._reply(400, b'{"error": "bad request"}')
        elif mode in ("drop", "droponce"):
            if mode == "droponce" and hit > 1:
                self._reply(200, self._chat(json.dumps(GOOD)))
                return
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)


@pytest.fixture
def server() -> Iterator[ChatServer]:
    srv = ChatServer()
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()
    thread.join(2)


def _config(server: ChatServer, **overrides: object) -> TeacherConfig:
    base = dict(backend="openai", base_url=server.base_url, model="teacher", timeout_s=0.2, max_retries=2,
                backoff_s=0.01, max_backoff_s=0.05, concurrency=4, queue_capacity=64)
    base.update(overrides)
    return TeacherConfig(**base)


def _cand(mode: str, i: int = 0) -> Candidate:
    return Candidate(parent_id=i, text=f"What is 2 + 2? MODE={mode} #{i}", difficulty=1.0,
                     parent_text="What is 1 + 1? {$x$}")


def test_normal_answer_and_request_shape(server: ChatServer, monkeypatch: pytest.MonkeyPatch,
                                         caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("HEAPA_TEACHER_KEY", "sk-do-not-log")
    teacher = OpenAITeacher(_config(server, api_key_env="HEAPA_TEACHER_KEY"))
    with caplog.at_level(logging.DEBUG):
        verdict = teacher.validate(_cand("ok"))
    assert verdict.accepted and verdict.answer == "4" and verdict.difficulty == 1.1
    body = server.bodies[0]
    assert body["model"] == "teacher" and body["response_format"] == {"type": "json_object"}
    assert body["messages"][0]["role"] == "system" and "What is 1 + 1? {$x$}" in body["messages"][1]["content"]
    assert server.headers_seen[0]["Authorization"] == "Bearer sk-do-not-log"
    assert "sk-do-not-log" not in caplog.text
    assert OpenAITeacher(_config(server, json_mode=False))._body(_cand("ok")).find(b"response_format") == -1


def test_fenced_reply_is_accepted(server: ChatServer) -> None:
    assert OpenAITeacher(_config(server)).validate(_cand("fenced")).accepted


def test_timeout_retries_then_raises(server: ChatServer) -> None:
    teacher = OpenAITeacher(_config(server))
    start = time.perf_counter()
    with pytest.raises(TeacherError) as err:
        teacher.validate(_cand("slow"))
    assert err.value.reason == "timeout"
    assert time.perf_counter() - start < 1.5
    assert teacher.counts["timeout"] == 3 and teacher.counts["retries"] == 2


def test_500s_then_success(server: ChatServer) -> None:
    teacher = OpenAITeacher(_config(server))
    assert teacher.validate(_cand("flaky")).accepted
    assert teacher.counts["http_5xx"] == 2 and teacher.counts["ok"] == 1


def test_429_is_retried(server: ChatServer) -> None:
    assert OpenAITeacher(_config(server)).validate(_cand("ratelimited")).accepted


def test_4xx_is_not_retried(server: ChatServer) -> None:
    teacher = OpenAITeacher(_config(server))
    with pytest.raises(TeacherError) as err:
        teacher.validate(_cand("bad"))
    assert err.value.reason == "http_4xx" and sum(server.hits.values()) == 1


def test_malformed_replies_are_counted_rejections(server: ChatServer) -> None:
    teacher = OpenAITeacher(_config(server))
    assert teacher.validate(_cand("malformed")).reason == "malformed_json"
    assert teacher.validate(_cand("notchat")).reason == "malformed_response"


def test_dropped_connection(server: ChatServer) -> None:
    teacher = OpenAITeacher(_config(server))
    assert teacher.validate(_cand("droponce")).accepted
    with pytest.raises(TeacherError) as err:
        teacher.validate(_cand("drop"))
    assert err.value.reason == "connection"


def test_connection_refused_is_a_connection_fault() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg = TeacherConfig(backend="openai", model="m", base_url=f"http://127.0.0.1:{port}/v1", timeout_s=0.2,
                        max_retries=1, backoff_s=0.01)
    with pytest.raises(TeacherError) as err:
        OpenAITeacher(cfg).validate(_cand("ok"))
    assert err.value.reason == "connection"


def test_concurrency_limit_is_respected(server: ChatServer) -> None:
    teacher = OpenAITeacher(_config(server, concurrency=2))
    threads = [threading.Thread(target=teacher.validate, args=(_cand("hold", i),)) for i in range(6)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join(5)
    # Six 0.1 s requests, at most two at a time: never more than 2 active and at least 0.3 s in all.
    assert server.max_active <= 2 and sum(server.hits.values()) == 6
    assert time.perf_counter() - start >= 0.29


def test_close_interrupts_backoff(server: ChatServer) -> None:
    teacher = OpenAITeacher(_config(server, backoff_s=5.0, max_backoff_s=5.0))
    errors: list[str] = []

    def run() -> None:
        try:
            teacher.validate(_cand("flaky"))
        except TeacherError as err:
            errors.append(err.reason)

    t = threading.Thread(target=run)
    t.start()
    time.sleep(0.2)
    start = time.perf_counter()
    teacher.close()
    t.join(2)
    assert not t.is_alive() and time.perf_counter() - start < 0.5 and errors == ["closed"]


def test_validator_over_http_loses_nothing_and_never_blocks(server: ChatServer) -> None:
    server.slow_s = 0.5
    modes = ["ok", "fenced", "slow", "flaky", "malformed", "drop", "droponce", "bad"] * 2
    cands = [_cand(m, i) for i, m in enumerate(modes)]
    validator = AsyncValidator.from_config(OpenAITeacher(_config(server)), _config(server))
    try:
        slowest = 0.0
        for chunk in (cands[:8], cands[8:]):
            start = time.perf_counter()
            assert validator.submit(chunk) == len(chunk)
            validator.drain()  # nothing may be ready yet; must not wait either way
            slowest = max(slowest, time.perf_counter() - start)
        assert slowest < 0.05
        assert validator.wait_idle(10)
        accepted = validator.drain()
    finally:
        validator.close()
    outcomes = validator.outcome_counts()
    assert sum(outcomes.values()) == len(cands)
    assert outcomes == {"accepted": 8, "timeout": 2, "malformed_json": 2, "connection": 2, "http_4xx": 2}
    texts = [c.text for c, _ in accepted]
    assert len(texts) == len(set(texts)) == 8
    assert {m for c in accepted for m in _MODE_RE.findall(c[0].text)} == {"ok", "fenced", "flaky", "droponce"}
    metrics = validator.metrics()
    assert metrics["teacher/latency_p95_s"] > 0 and metrics["teacher/http/timeout"] == 6
