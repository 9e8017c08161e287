"""The OpenAI-compatible teacher against a real local HTTP/1.1 server (stdlib, 127.0.0.1, port 0).

The server speaks ``POST /v1/chat/completions`` and ``GET /v1/models``; the candidate text carries a ``MODE=...``
marker that picks its behaviour: a normal answer, a slow one (beyond the client timeout), a slow drip (a byte
every 0.1 s: no single read ever times out), a body cut short (with and without Content-Length), 500s then
success, 429 with Retry-After, malformed JSON, a dropped connection, a 400, an over-long answer. Short timeouts
keep every test to about a second.
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
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from verl_ext.augment.config import TeacherConfig
from verl_ext.augment.parser import Candidate
from verl_ext.augment.teacher import OpenAITeacher, TeacherError, TeacherUnreachableError, probe_teacher
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
        self.slow_s = 2.0
        self.drip_s = 0.1
        self.connections = 0
        self.models: list[str] = ["teacher"]
        self.models_status = 200
        self.times: dict[str, list[float]] = {}  # request key -> arrival times (retry spacing)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"


class _Handler(BaseHTTPRequestHandler):
    server: ChatServer
    protocol_version = "HTTP/1.1"  # keep-alive, so connection reuse is observable

    def setup(self) -> None:
        super().setup()
        with self.server.lock:
            self.server.connections += 1

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - silence the default stderr log
        return

    def finish(self) -> None:
        with contextlib.suppress(OSError):  # the client (or the 'drop' mode) already closed the socket
            super().finish()

    def _reply(self, status: int, payload: bytes, headers: dict | None = None) -> None:
        with contextlib.suppress(OSError):  # a timed-out client hung up
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(payload)

    def _cut(self, payload: bytes, with_length: bool) -> None:
        """Half the body, then close: with Content-Length the client sees a short body; without, a cut JSON."""
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            if with_length:
                self.send_header("Content-Length", str(len(payload)))
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(payload[: len(payload) // 2])
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_RDWR)

    def _drip(self, payload: bytes) -> None:
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            for i in range(len(payload)):
                self.wfile.write(payload[i:i + 1])
                self.wfile.flush()
                time.sleep(self.server.drip_s)

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        srv = self.server
        srv.headers_seen.append(dict(self.headers))
        needs_key = srv.models_status == 401
        if needs_key and self.headers.get("Authorization") != "Bearer right-key":
            self._reply(401, b'{"error": "no or bad key"}')
        elif srv.models_status == 0:  # drip the model list
            self._drip(json.dumps({"object": "list", "data": []}).encode())
        elif srv.models_status not in (200, 401):
            self._reply(srv.models_status, b'{"error": "no such route"}')
        else:
            data = [{"id": m, "object": "model", "created": 0, "owned_by": "me"} for m in srv.models]
            self._reply(200, json.dumps({"object": "list", "data": data}).encode())

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
            srv.times.setdefault(key, []).append(time.monotonic())
            hit = srv.hits[key]
            srv.bodies.append(body)
            srv.headers_seen.append(dict(self.headers))
        self._serve_mode(mode, hit)

    def _serve_mode(self, mode: str, hit: int) -> None:
        if mode == "ok":
            self._reply(200, self._chat(json.dumps(GOOD)))
        elif mode == "hold":  # counted while held, not while the reply is written (the client may be done)
            with self.server.lock:
                self.server.active += 1
                self.server.max_active = max(self.server.max_active, self.server.active)
            time.sleep(0.1)
            with self.server.lock:
                self.server.active -= 1
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
        elif mode in ("retryafter", "retryafterlong", "retryafterms"):
            header = {"retryafter": {"Retry-After": "1"}, "retryafterlong": {"Retry-After": "3600"},
                      "retryafterms": {"retry-after-ms": "400"}}[mode]
            self._reply(429, b"{}", header) if hit == 1 else self._reply(200, self._chat(json.dumps(GOOD)))
        elif mode == "slowdrip":
            self._drip(self._chat(json.dumps(GOOD)))
        elif mode in ("cutlength", "cutclose"):
            if hit > 1:
                self._reply(200, self._chat(json.dumps(GOOD)))
            else:
                self._cut(self._chat(json.dumps(GOOD)), with_length=mode == "cutlength")
        elif mode == "longanswer":
            self._reply(200, self._chat(json.dumps({**GOOD, "answer": "9" * 60_000})))
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
    base = dict(backend="openai", base_url=server.base_url, model="teacher", timeout_s=0.5, max_retries=2,
                backoff_s=0.01, max_backoff_s=0.05, concurrency=4, queue_capacity=64)
    base.update(overrides)
    return TeacherConfig(**base)


def _cand(mode: str, i: int = 0) -> Candidate:
    return Candidate(parent_id=i, text=f"What is 2 + 2? MODE={mode} #{i}", difficulty=1.0,
                     parent_text="What is 1 + 1? {$x$}")


@pytest.fixture
def teachers() -> Iterator[Callable[[TeacherConfig], OpenAITeacher]]:
    """Build teachers that are closed (loop thread, connections) when the test ends."""
    made: list[OpenAITeacher] = []

    def make(cfg: TeacherConfig) -> OpenAITeacher:
        made.append(OpenAITeacher(cfg))
        return made[-1]

    yield make
    for teacher in made:
        teacher.close()


def _timed(fn: Callable[[], object]) -> tuple[object, float]:
    start = time.perf_counter()
    try:
        out: object = fn()
    except (TeacherError, TeacherUnreachableError) as err:
        out = err
    return out, time.perf_counter() - start


def test_normal_answer_and_request_shape(server, teachers, monkeypatch, caplog) -> None:
    monkeypatch.setenv("HEAPA_TEACHER_KEY", "sk-do-not-log")
    teacher = teachers(_config(server, api_key_env="HEAPA_TEACHER_KEY"))
    with caplog.at_level(logging.DEBUG):
        verdict = teacher.validate(_cand("ok"))
    assert verdict.accepted and verdict.answer == "4" and verdict.difficulty == 1.1
    body = server.bodies[0]
    assert body["model"] == "teacher" and body["response_format"] == {"type": "json_object"}
    assert "temperature" not in body and "max_tokens" not in body  # sent only when configured
    assert body["messages"][0]["role"] == "system" and "What is 1 + 1? {$x$}" in body["messages"][1]["content"]
    headers = {k.lower(): v for k, v in server.headers_seen[0].items()}
    assert headers["authorization"] == "Bearer sk-do-not-log"
    assert "sk-do-not-log" not in caplog.text


def test_configured_sampling_fields_and_extra_body_reach_the_server(server, teachers) -> None:
    cfg = _config(server, temperature=0.0, max_tokens=64, json_mode=False, extra_body={"top_k": 1})
    assert teachers(cfg).validate(_cand("ok")).accepted
    body = server.bodies[0]
    assert body["temperature"] == 0.0 and body["max_tokens"] == 64 and body["top_k"] == 1
    assert "response_format" not in body


def test_no_key_needed_for_a_local_server(server, teachers, monkeypatch) -> None:
    monkeypatch.delenv("TEACHER_API_KEY", raising=False)
    assert teachers(_config(server, api_key_env="TEACHER_API_KEY")).validate(_cand("ok")).accepted


def test_connections_are_reused(server, teachers) -> None:
    teacher = teachers(_config(server))
    for i in range(5):
        assert teacher.validate(_cand("ok", i)).accepted
    assert server.connections == 1


def test_fenced_reply_is_accepted(server, teachers) -> None:
    assert teachers(_config(server)).validate(_cand("fenced")).accepted


def test_timeout_retries_then_raises(server, teachers) -> None:
    teacher = teachers(_config(server))
    err, took = _timed(lambda: teacher.validate(_cand("slow")))
    assert isinstance(err, TeacherError) and err.reason == "timeout"
    assert took < 3.5  # three 0.5 s attempts and two short backoffs (a 2 s answer each), room for a busy machine
    assert teacher.counts["timeout"] == 3 and teacher.counts["retries"] == 2


def test_slow_drip_ends_within_the_total_deadline(server, teachers) -> None:
    # A byte every 0.1 s: no socket read waits 0.5 s, so only a total deadline ends the request.
    teacher = teachers(_config(server, timeout_s=0.5, max_retries=0))
    err, took = _timed(lambda: teacher.validate(_cand("slowdrip")))
    assert isinstance(err, TeacherError) and err.reason == "timeout"
    assert 0.45 <= took < 1.5  # the drip alone would take over 20 s


def test_slow_drip_never_pins_the_workers(server) -> None:
    """25 candidates against a drip server, 8 workers: every one ends (as a timeout) within its deadline."""
    cfg = _config(server, timeout_s=0.5, max_retries=0, concurrency=8)
    validator = AsyncValidator.from_config(OpenAITeacher(cfg), cfg)
    ages = []
    try:
        start = time.perf_counter()
        assert validator.submit([_cand("slowdrip", i) for i in range(25)]) == 25
        while validator.pending() and time.perf_counter() - start < 10:
            ages.append(validator.metrics()["teacher/oldest_inflight_s"])
            time.sleep(0.05)
        wall = time.perf_counter() - start
        metrics = validator.metrics()
    finally:
        validator.close()
    assert validator.outcome_counts() == {"timeout": 25}
    assert wall < 6.0  # four waves of at most 8 (2 s); each drip alone would take over 20 s
    assert 0.2 < max(ages) < 0.5 + 0.5  # the age metric sees calls in flight, never far past the deadline
    assert metrics["teacher/latency_p95_s"] < 0.5 + 0.5 and metrics["teacher/oldest_inflight_s"] == 0.0


@pytest.mark.parametrize("mode", ["cutlength", "cutclose"])
def test_a_body_cut_short_is_retried(server, teachers, mode) -> None:
    teacher = teachers(_config(server))
    assert teacher.validate(_cand(mode)).accepted
    assert teacher.counts["truncated"] == 1 and teacher.counts["retries"] == 1 and teacher.counts["ok"] == 1


def test_500s_then_success(server, teachers) -> None:
    teacher = teachers(_config(server))
    assert teacher.validate(_cand("flaky")).accepted
    assert teacher.counts["http_5xx"] == 2 and teacher.counts["ok"] == 1


def test_429_is_retried(server, teachers) -> None:
    assert teachers(_config(server)).validate(_cand("ratelimited")).accepted


@pytest.mark.parametrize(("mode", "low", "high"), [("retryafter", 0.95, 2.5), ("retryafterms", 0.38, 1.5),
                                                  ("retryafterlong", 0.28, 1.5)])
def test_retry_after_is_honoured_and_capped(server, teachers, mode, low, high) -> None:
    # backoff alone would wait ~0.01 s; the server asks for 1 s / 400 ms / an hour (capped at 0.3 s)
    teacher = teachers(_config(server, max_retry_after_s=0.3 if mode == "retryafterlong" else 60.0))
    assert teacher.validate(_cand(mode)).accepted
    first, second = server.times[next(iter(server.times))]
    assert low <= second - first < high
    assert teacher.counts["http_429"] == 1


def test_4xx_is_not_retried(server, teachers) -> None:
    teacher = teachers(_config(server))
    err, _ = _timed(lambda: teacher.validate(_cand("bad")))
    assert isinstance(err, TeacherError) and err.reason == "http_4xx" and sum(server.hits.values()) == 1


def test_malformed_replies_are_counted_rejections(server, teachers) -> None:
    teacher = teachers(_config(server))
    assert teacher.validate(_cand("malformed")).reason == "malformed_json"
    assert teacher.validate(_cand("notchat")).reason == "malformed_response"


def test_an_over_long_answer_is_rejected_not_pooled(server, teachers) -> None:
    verdict = teachers(_config(server, max_answer_chars=512)).validate(_cand("longanswer"))
    assert not verdict.accepted and verdict.reason == "answer_too_long"


def test_dropped_connection(server, teachers) -> None:
    teacher = teachers(_config(server))
    assert teacher.validate(_cand("droponce")).accepted
    err, _ = _timed(lambda: teacher.validate(_cand("drop")))
    assert isinstance(err, TeacherError) and err.reason == "connection"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_connection_refused_is_a_connection_fault(teachers) -> None:
    cfg = TeacherConfig(backend="openai", model="m", base_url=f"http://127.0.0.1:{_free_port()}/v1", timeout_s=0.2,
                        max_retries=1, backoff_s=0.01)
    err, _ = _timed(lambda: teachers(cfg).validate(_cand("ok")))
    assert isinstance(err, TeacherError) and err.reason == "connection"


def test_concurrency_limit_is_respected(server, teachers) -> None:
    teacher = teachers(_config(server, concurrency=2, timeout_s=2.0))
    threads = [threading.Thread(target=teacher.validate, args=(_cand("hold", i),)) for i in range(6)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join(5)
    # Six 0.1 s requests, at most two at a time: never more than 2 active and at least 0.3 s in all.
    assert server.max_active <= 2 and sum(server.hits.values()) == 6
    assert time.perf_counter() - start >= 0.29


def _validate_in_thread(teacher: OpenAITeacher, cand: Candidate) -> tuple[threading.Thread, list[str]]:
    errors: list[str] = []

    def run() -> None:
        try:
            teacher.validate(cand)
        except TeacherError as err:
            errors.append(err.reason)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, errors


@pytest.mark.parametrize("mode", ["flaky", "slowdrip"])
def test_close_interrupts_backoff_and_requests_in_flight(server, mode) -> None:
    teacher = OpenAITeacher(_config(server, backoff_s=5.0, max_backoff_s=5.0, timeout_s=30.0))
    thread, errors = _validate_in_thread(teacher, _cand(mode))
    time.sleep(0.3)  # flaky: sleeping in its 5 s backoff; slowdrip: inside a 30 s request
    start = time.perf_counter()
    teacher.close()
    thread.join(3)
    assert not thread.is_alive() and time.perf_counter() - start < 1.0 and errors == ["closed"]


def test_validator_over_http_loses_nothing_and_never_blocks(server) -> None:
    server.slow_s = 1.5
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
    # 2 slow candidates x 3 attempts; on a busy machine another 0.5 s attempt may time out (and be retried)
    assert metrics["teacher/latency_p95_s"] > 0 and metrics["teacher/http/timeout"] >= 6


# ------------------------------------------------------------------------------------------ start-up probe
def test_probe_reports_a_reachable_server(server, caplog) -> None:
    assert "reachable, 1 model(s) listed" in probe_teacher(_config(server, probe_timeout_s=2))
    server.models = ["other"]
    with caplog.at_level(logging.WARNING):
        probe_teacher(_config(server, probe_timeout_s=2))
    assert "does not list model 'teacher'" in caplog.text
    server.models_status = 404  # a gateway without /models is still a server
    assert "HTTP 404" in probe_teacher(_config(server, probe_timeout_s=2))


def test_probe_names_teacher_base_url_when_nothing_listens() -> None:
    url = f"http://127.0.0.1:{_free_port()}/v1"
    cfg = TeacherConfig(backend="openai", model="m", base_url=url, probe_timeout_s=10)
    err, took = _timed(lambda: probe_teacher(cfg))
    assert isinstance(err, TeacherUnreachableError)
    assert "TEACHER_BASE_URL" in str(err) and url in str(err) and "heapa.augmentation.enabled=false" in str(err)
    assert took < 5.0  # a refused connection fails at once, not at the 10 s deadline


def test_probe_has_a_total_deadline(server) -> None:
    server.models_status = 0  # drips the model list
    err, took = _timed(lambda: probe_teacher(_config(server, probe_timeout_s=0.5)))
    assert isinstance(err, TeacherUnreachableError) and "no answer within 0.5 s" in str(err)
    assert took < 2.0  # the 30-byte list dripped at 10 bytes/s would take 3 s


def test_probe_names_the_key_variable_on_401(server, monkeypatch) -> None:
    server.models_status = 401
    monkeypatch.delenv("HEAPA_PROBE_KEY", raising=False)
    with pytest.raises(TeacherUnreachableError, match="HEAPA_PROBE_KEY .*is not set"):
        probe_teacher(_config(server, api_key_env="HEAPA_PROBE_KEY", probe_timeout_s=2))
    monkeypatch.setenv("HEAPA_PROBE_KEY", "wrong-key")
    with pytest.raises(TeacherUnreachableError, match="the key in HEAPA_PROBE_KEY .*was refused") as err:
        probe_teacher(_config(server, api_key_env="HEAPA_PROBE_KEY", probe_timeout_s=2))
    assert "wrong-key" not in str(err.value)
    monkeypatch.setenv("HEAPA_PROBE_KEY", "right-key")
    assert "reachable" in probe_teacher(_config(server, api_key_env="HEAPA_PROBE_KEY", probe_timeout_s=2))
