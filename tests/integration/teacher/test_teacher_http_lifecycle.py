"""The teacher over real HTTP beyond one request: refused connections, the concurrency limit, close() in the
middle of a request or a backoff, the AsyncValidator losing nothing, and the start-up probe. The server is
``_teacher_http.ChatServer`` (see ``test_openai_teacher_http.py`` for its modes)."""

from __future__ import annotations

import logging
import threading
import time

import pytest

from _teacher_http import MODE_RE, ChatServer, cand, config_for, free_port, timed, validate_in_thread
from verl_ext.augment.config import TeacherConfig
from verl_ext.augment.teacher import OpenAITeacher, TeacherError, TeacherUnreachableError, probe_teacher
from verl_ext.augment.validator import AsyncValidator


def test_connection_refused_is_a_connection_fault(teachers) -> None:
    cfg = TeacherConfig(backend="openai", model="m", base_url=f"http://127.0.0.1:{free_port()}/v1", timeout_s=0.2,
                        max_retries=1, backoff_s=0.01)
    err, _ = timed(lambda: teachers(cfg).validate(cand("ok")))
    assert isinstance(err, TeacherError) and err.reason == "connection"


def test_concurrency_limit_is_respected(server, teachers) -> None:
    teacher = teachers(config_for(server, concurrency=2, timeout_s=2.0))
    threads = [threading.Thread(target=teacher.validate, args=(cand("hold", i),)) for i in range(6)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join(5)
    # Six 0.1 s requests, at most two at a time: never more than 2 active and at least 0.3 s in all.
    assert server.max_active <= 2 and sum(server.hits.values()) == 6
    assert time.perf_counter() - start >= 0.29


@pytest.mark.parametrize("mode", ["flaky", "slowdrip"])
def test_close_interrupts_backoff_and_requests_in_flight(server, mode) -> None:
    teacher = OpenAITeacher(config_for(server, backoff_s=5.0, max_backoff_s=5.0, timeout_s=30.0))
    thread, errors = validate_in_thread(teacher, cand(mode))
    time.sleep(0.3)  # flaky: sleeping in its 5 s backoff; slowdrip: inside a 30 s request
    start = time.perf_counter()
    teacher.close()
    thread.join(3)
    assert not thread.is_alive() and time.perf_counter() - start < 1.0 and errors == ["closed"]


def test_validator_over_http_loses_nothing_and_never_blocks(server) -> None:
    server.slow_s = 1.5
    modes = ["ok", "fenced", "slow", "flaky", "malformed", "drop", "droponce", "bad"] * 2
    cands = [cand(m, i) for i, m in enumerate(modes)]
    validator = AsyncValidator.from_config(OpenAITeacher(config_for(server)), config_for(server))
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
    assert {m for c in accepted for m in MODE_RE.findall(c[0].text)} == {"ok", "fenced", "flaky", "droponce"}
    metrics = validator.metrics()
    # 2 slow candidates x 3 attempts; on a busy machine another 0.5 s attempt may time out (and be retried)
    assert metrics["teacher/latency_p95_s"] > 0 and metrics["teacher/http/timeout"] >= 6


# ------------------------------------------------------------------------------------------ start-up probe
def test_probe_reports_a_reachable_server(server, caplog) -> None:
    assert "reachable, 1 model(s) listed" in probe_teacher(config_for(server, probe_timeout_s=2))
    server.models = ["other"]
    with caplog.at_level(logging.WARNING):
        probe_teacher(config_for(server, probe_timeout_s=2))
    assert "does not list model 'teacher'" in caplog.text
    server.models_status = 404  # a gateway without /models is still a server
    assert "HTTP 404" in probe_teacher(config_for(server, probe_timeout_s=2))


def test_probe_names_teacher_base_url_when_nothing_listens() -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"
    cfg = TeacherConfig(backend="openai", model="m", base_url=url, probe_timeout_s=10)
    err, took = timed(lambda: probe_teacher(cfg))
    assert isinstance(err, TeacherUnreachableError)
    assert "TEACHER_BASE_URL" in str(err) and url in str(err) and "heapa.augmentation.enabled=false" in str(err)
    assert took < 5.0  # a refused connection fails at once, not at the 10 s deadline


def test_probe_has_a_total_deadline(server) -> None:
    server.models_status = 0  # drips the model list
    err, took = timed(lambda: probe_teacher(config_for(server, probe_timeout_s=0.5)))
    assert isinstance(err, TeacherUnreachableError) and "no answer within 0.5 s" in str(err)
    assert took < 2.0  # the 30-byte list dripped at 10 bytes/s would take 3 s


def test_probe_names_the_key_variable_on_401(server, monkeypatch) -> None:
    server.models_status = 401
    monkeypatch.delenv("HEAPA_PROBE_KEY", raising=False)
    with pytest.raises(TeacherUnreachableError, match="HEAPA_PROBE_KEY .*is not set"):
        probe_teacher(config_for(server, api_key_env="HEAPA_PROBE_KEY", probe_timeout_s=2))
    monkeypatch.setenv("HEAPA_PROBE_KEY", "wrong-key")
    with pytest.raises(TeacherUnreachableError, match="the key in HEAPA_PROBE_KEY .*was refused") as err:
        probe_teacher(config_for(server, api_key_env="HEAPA_PROBE_KEY", probe_timeout_s=2))
    assert "wrong-key" not in str(err.value)
    monkeypatch.setenv("HEAPA_PROBE_KEY", "right-key")
    assert "reachable" in probe_teacher(config_for(server, api_key_env="HEAPA_PROBE_KEY", probe_timeout_s=2))
