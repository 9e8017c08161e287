"""The OpenAI-compatible teacher against a real local HTTP/1.1 server (stdlib, 127.0.0.1, port 0).

The server speaks ``POST /v1/chat/completions`` and ``GET /v1/models``; the candidate text carries a ``MODE=...``
marker that picks its behaviour: a normal answer, a slow one (beyond the client timeout), a slow drip (a byte
every 0.1 s: no single read ever times out), a body cut short (with and without Content-Length), 500s then
success, 429 with Retry-After, malformed JSON, a dropped connection, a 400, an over-long answer. Short timeouts
keep every test to about a second.
"""

from __future__ import annotations

import logging
import time

import pytest

from _teacher_http import cand, config_for, timed
from verl_ext.augment.teacher import OpenAITeacher, TeacherError
from verl_ext.augment.validator import AsyncValidator


def test_normal_answer_and_request_shape(server, teachers, monkeypatch, caplog) -> None:
    monkeypatch.setenv("HEAPA_TEACHER_KEY", "sk-do-not-log")
    teacher = teachers(config_for(server, api_key_env="HEAPA_TEACHER_KEY"))
    with caplog.at_level(logging.DEBUG):
        verdict = teacher.validate(cand("ok"))
    assert verdict.accepted and verdict.answer == "4" and verdict.difficulty == 1.1
    body = server.bodies[0]
    assert body["model"] == "teacher" and body["response_format"] == {"type": "json_object"}
    assert "temperature" not in body and "max_tokens" not in body  # sent only when configured
    assert body["messages"][0]["role"] == "system" and "What is 1 + 1? {$x$}" in body["messages"][1]["content"]
    headers = {k.lower(): v for k, v in server.headers_seen[0].items()}
    assert headers["authorization"] == "Bearer sk-do-not-log"
    assert "sk-do-not-log" not in caplog.text


def test_configured_sampling_fields_and_extra_body_reach_the_server(server, teachers) -> None:
    cfg = config_for(server, temperature=0.0, max_tokens=64, json_mode=False, extra_body={"top_k": 1})
    assert teachers(cfg).validate(cand("ok")).accepted
    body = server.bodies[0]
    assert body["temperature"] == 0.0 and body["max_tokens"] == 64 and body["top_k"] == 1
    assert "response_format" not in body


def test_no_key_needed_for_a_local_server(server, teachers, monkeypatch) -> None:
    monkeypatch.delenv("TEACHER_API_KEY", raising=False)
    assert teachers(config_for(server, api_key_env="TEACHER_API_KEY")).validate(cand("ok")).accepted


def test_connections_are_reused(server, teachers) -> None:
    teacher = teachers(config_for(server))
    for i in range(5):
        assert teacher.validate(cand("ok", i)).accepted
    assert server.connections == 1


def test_fenced_reply_is_accepted(server, teachers) -> None:
    assert teachers(config_for(server)).validate(cand("fenced")).accepted


def test_timeout_retries_then_raises(server, teachers) -> None:
    teacher = teachers(config_for(server))
    err, took = timed(lambda: teacher.validate(cand("slow")))
    assert isinstance(err, TeacherError) and err.reason == "timeout"
    assert took < 3.5  # three 0.5 s attempts and two short backoffs (a 2 s answer each), room for a busy machine
    assert teacher.counts["timeout"] == 3 and teacher.counts["retries"] == 2


def test_slow_drip_ends_within_the_total_deadline(server, teachers) -> None:
    # A byte every 0.1 s: no socket read waits 0.5 s, so only a total deadline ends the request.
    teacher = teachers(config_for(server, timeout_s=0.5, max_retries=0))
    err, took = timed(lambda: teacher.validate(cand("slowdrip")))
    assert isinstance(err, TeacherError) and err.reason == "timeout"
    assert 0.45 <= took < 1.5  # the drip alone would take over 20 s


def test_slow_drip_never_pins_the_workers(server) -> None:
    """25 candidates against a drip server, 8 workers: every one ends (as a timeout) within its deadline."""
    cfg = config_for(server, timeout_s=0.5, max_retries=0, concurrency=8)
    validator = AsyncValidator.from_config(OpenAITeacher(cfg), cfg)
    ages = []
    try:
        start = time.perf_counter()
        assert validator.submit([cand("slowdrip", i) for i in range(25)]) == 25
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
    teacher = teachers(config_for(server))
    assert teacher.validate(cand(mode)).accepted
    assert teacher.counts["truncated"] == 1 and teacher.counts["retries"] == 1 and teacher.counts["ok"] == 1


def test_500s_then_success(server, teachers) -> None:
    teacher = teachers(config_for(server))
    assert teacher.validate(cand("flaky")).accepted
    assert teacher.counts["http_5xx"] == 2 and teacher.counts["ok"] == 1


def test_429_is_retried(server, teachers) -> None:
    assert teachers(config_for(server)).validate(cand("ratelimited")).accepted


@pytest.mark.parametrize(("mode", "low", "high"), [("retryafter", 0.95, 2.5), ("retryafterms", 0.38, 1.5),
                                                  ("retryafterlong", 0.28, 1.5)])
def test_retry_after_is_honoured_and_capped(server, teachers, mode, low, high) -> None:
    # backoff alone would wait ~0.01 s; the server asks for 1 s / 400 ms / an hour (capped at 0.3 s)
    teacher = teachers(config_for(server, max_retry_after_s=0.3 if mode == "retryafterlong" else 60.0))
    assert teacher.validate(cand(mode)).accepted
    first, second = server.times[next(iter(server.times))]
    assert low <= second - first < high
    assert teacher.counts["http_429"] == 1


def test_4xx_is_not_retried(server, teachers) -> None:
    teacher = teachers(config_for(server))
    err, _ = timed(lambda: teacher.validate(cand("bad")))
    assert isinstance(err, TeacherError) and err.reason == "http_4xx" and sum(server.hits.values()) == 1


def test_malformed_replies_are_counted_rejections(server, teachers) -> None:
    teacher = teachers(config_for(server))
    assert teacher.validate(cand("malformed")).reason == "malformed_json"
    assert teacher.validate(cand("notchat")).reason == "malformed_response"


def test_an_over_long_answer_is_rejected_not_pooled(server, teachers) -> None:
    verdict = teachers(config_for(server, max_answer_chars=512)).validate(cand("longanswer"))
    assert not verdict.accepted and verdict.reason == "answer_too_long"


def test_dropped_connection(server, teachers) -> None:
    teacher = teachers(config_for(server))
    assert teacher.validate(cand("droponce")).accepted
    err, _ = timed(lambda: teacher.validate(cand("drop")))
    assert isinstance(err, TeacherError) and err.reason == "connection"
