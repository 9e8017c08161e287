"""A real local OpenAI-compatible chat server (stdlib HTTP/1.1 on 127.0.0.1, port 0) and the helpers the teacher
tests share; the fixtures that start it are in ``conftest.py``. What each ``MODE=...`` marker makes it do is in
``test_openai_teacher_http.py``'s docstring."""

from __future__ import annotations

import contextlib
import json
import re
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from verl_ext.augment.config import TeacherConfig
from verl_ext.augment.parser import Candidate
from verl_ext.augment.teacher import OpenAITeacher, TeacherError, TeacherUnreachableError

MODE_RE = re.compile(r"MODE=(\w+)")
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
        mode_match = MODE_RE.search(body["messages"][-1]["content"])
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


def config_for(server: ChatServer, **overrides: object) -> TeacherConfig:
    base = dict(backend="openai", base_url=server.base_url, model="teacher", timeout_s=0.5, max_retries=2,
                backoff_s=0.01, max_backoff_s=0.05, concurrency=4, queue_capacity=64)
    base.update(overrides)
    return TeacherConfig(**base)


def cand(mode: str, i: int = 0) -> Candidate:
    return Candidate(parent_id=i, text=f"What is 2 + 2? MODE={mode} #{i}", difficulty=1.0,
                     parent_text="What is 1 + 1? {$x$}")


def timed(fn: Callable[[], object]) -> tuple[object, float]:
    start = time.perf_counter()
    try:
        out: object = fn()
    except (TeacherError, TeacherUnreachableError) as err:
        out = err
    return out, time.perf_counter() - start


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def validate_in_thread(teacher: OpenAITeacher, cand: Candidate) -> tuple[threading.Thread, list[str]]:
    errors: list[str] = []

    def run() -> None:
        try:
            teacher.validate(cand)
        except TeacherError as err:
            errors.append(err.reason)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, errors
