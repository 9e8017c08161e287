"""A teacher backed by any OpenAI-compatible chat-completions server (vLLM, SGLang, OpenAI, ...).

Built on the ``openai`` client library (connection pooling, request building, error types), used through its
async client on one private event-loop thread so that every HTTP attempt ends within ``timeout_s`` *in total*:
the library's timeouts bound each socket read, which a server trickling one byte a second never trips. The
library's own retries are off; this module retries timeouts, dropped or cut-off responses (a 200 whose body is
not JSON), 408/429 and 5xx with exponential backoff, or after the server's ``Retry-After`` (capped). Other 4xx
are the caller's mistake and fail at once. After the last retry the fault is raised as ``TeacherError`` so the
validator counts it. The API key is read from the environment variable NAMED in the config and never logged.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import ipaddress
import json
import logging
import os
import random
import threading
import urllib.parse
from collections import Counter
from typing import Any

import openai

from verl_ext.augment.config import TeacherConfig
from verl_ext.augment.parser import Candidate
from verl_ext.augment.teacher.base import TeacherError, Verdict
from verl_ext.augment.teacher.reply import verdict_from_reply
from verl_ext.augment.teacher.retry_after import retry_after_seconds

logger = logging.getLogger(__name__)

REASON_TIMEOUT = "timeout"
REASON_CONNECTION = "connection"
REASON_TRUNCATED = "truncated"
REASON_HTTP_5XX = "http_5xx"
REASON_HTTP_4XX = "http_4xx"
REASON_RATE_LIMITED = "http_429"
REASON_CLOSED = "closed"
REASON_MALFORMED_RESPONSE = "malformed_response"

MAX_RESPONSE_BYTES = 4 * 1024 * 1024
NO_KEY = "EMPTY"  # what vLLM's docs pass when the server has no --api-key; the library insists on some key
# How long past its own deadline a worker waits for the event loop before giving up on an attempt.
_LOOP_GRACE_S = 5.0
_TRUNCATION_HINTS = ("incomplete", "complete message body", "IncompleteRead")


class _RetryableError(Exception):
    def __init__(self, reason: str, retry_after: float | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retry_after = retry_after


def is_loopback(url: str) -> bool:
    host = urllib.parse.urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def api_key(config: TeacherConfig) -> str | None:
    """The key from the environment variable named by ``config.api_key_env``; None when unset or unnamed."""
    return (os.environ.get(config.api_key_env) or None) if config.api_key_env else None


def make_async_client(config: TeacherConfig, timeout_s: float) -> openai.AsyncOpenAI:
    """The library's async client, its own retries off; loopback servers bypass any http(s)_proxy."""
    kwargs: dict[str, Any] = {}
    if is_loopback(config.base_url):
        kwargs["http_client"] = openai.DefaultAsyncHttpxClient(trust_env=False)
    return openai.AsyncOpenAI(api_key=api_key(config) or NO_KEY, base_url=config.base_url.rstrip("/"),
                              max_retries=0, timeout=timeout_s, **kwargs)


def render_user_message(candidate: Candidate) -> str:
    """The user turn: original and generation, concatenated (never ``str.format``: '$' and '{' pass unchanged)."""
    return "ORIGINAL:\n" + candidate.parent_text.strip() + "\n\nGENERATION:\n" + candidate.text.strip()


class OpenAITeacher:
    """Validates candidates by asking a chat model for ``{clean, solvable, answer, difficulty}``.

    Thread-safe: the validator's workers share one instance (and one connection pool); a semaphore caps
    simultaneous requests at ``config.concurrency``. ``close()`` cancels requests in flight and interrupts
    backoff sleeps, so shutdown is prompt.
    """

    def __init__(self, config: TeacherConfig) -> None:
        self.config = config
        if config.api_key_env and api_key(config) is None:
            logger.info("teacher: environment variable %s is not set; requests go without a key (fine for a "
                        "local server started without --api-key)", config.api_key_env)
        self._slots = threading.BoundedSemaphore(config.concurrency)
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._futures: set[concurrent.futures.Future] = set()
        self.counts: Counter[str] = Counter()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="heapa-teacher-http", daemon=True)
        self._thread.start()
        self._client = self._on_loop(_build(config))

    # -- public -------------------------------------------------------------------------------------------
    def validate(self, candidate: Candidate) -> Verdict:
        content = self._complete(self.request(candidate))
        if content is None:
            return Verdict.reject(REASON_MALFORMED_RESPONSE)
        return verdict_from_reply(content, self.config.max_clean_chars, self.config.max_answer_chars)

    def request(self, candidate: Candidate) -> dict[str, Any]:
        """Keyword arguments of ``chat.completions.create``: optional sampling fields only when configured."""
        cfg = self.config
        kwargs: dict[str, Any] = {
            "model": cfg.model,
            "messages": [
                {"role": "system", "content": cfg.prompt},
                {"role": "user", "content": render_user_message(candidate)},
            ],
        }
        if cfg.temperature is not None:
            kwargs["temperature"] = cfg.temperature
        if cfg.max_tokens is not None:
            kwargs["max_tokens"] = cfg.max_tokens
        if cfg.json_mode:
            kwargs["response_format"] = {"type": "json_object"}
        if cfg.extra_body:
            kwargs["extra_body"] = dict(cfg.extra_body)
        return kwargs

    def close(self) -> None:
        """Cancel requests in flight, interrupt backoff sleeps, close the connections and stop the loop."""
        with self._lock:
            if self._closed.is_set():
                return
            self._closed.set()
            pending = list(self._futures)
        for fut in pending:
            fut.cancel()
        try:
            self._on_loop(self._client.close(), timeout=2.0)
        except (concurrent.futures.TimeoutError, RuntimeError) as err:
            logger.warning("teacher: closing the HTTP client did not finish cleanly: %r", err)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(2.0)

    def metrics(self) -> dict[str, float]:
        with self._lock:
            return {f"teacher/http/{k}": float(v) for k, v in self.counts.items()}

    # -- internals ----------------------------------------------------------------------------------------
    def _on_loop(self, coro, timeout: float | None = None):
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def _count(self, key: str) -> None:
        with self._lock:
            self.counts[key] += 1

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        base = min(self.config.max_backoff_s, self.config.backoff_s * (2**attempt))
        # Jitter spreads simultaneous retries of many workers; timing only, so an unseeded generator is fine.
        delay = base * (1.0 + 0.25 * random.random())
        if retry_after is not None:  # the server said when: not sooner, but never longer than the cap
            delay = max(delay, min(retry_after, self.config.max_retry_after_s))
        return delay

    def _complete(self, kwargs: dict[str, Any]) -> str | None:
        """POST with retries; the message content, None when the body is JSON but not a chat completion."""
        last = REASON_CONNECTION
        for attempt in range(self.config.max_retries + 1):
            if self._closed.is_set():
                raise TeacherError(REASON_CLOSED)
            retry_after = None
            try:
                with self._slots:
                    raw = self._post_once(kwargs)
                content = _message_content(raw)
                self._count("ok")
                return content
            except _RetryableError as err:
                last, retry_after = err.reason, err.retry_after
                self._count(err.reason)
            if attempt < self.config.max_retries:
                self._count("retries")
                if self._closed.wait(self._delay(attempt, retry_after)):
                    raise TeacherError(REASON_CLOSED)
        raise TeacherError(last, f"gave up after {self.config.max_retries + 1} attempts")

    def _post_once(self, kwargs: dict[str, Any]) -> bytes:
        with self._lock:  # registered under the lock: close() either sees this future or we see it closed
            if self._closed.is_set():
                raise TeacherError(REASON_CLOSED)
            fut = asyncio.run_coroutine_threadsafe(self._attempt(kwargs), self._loop)
            self._futures.add(fut)
        try:
            return fut.result(self.config.timeout_s + _LOOP_GRACE_S)
        except concurrent.futures.CancelledError:
            raise TeacherError(REASON_CLOSED) from None
        except concurrent.futures.TimeoutError:
            fut.cancel()  # the loop itself is stuck (should not happen): never wait past the deadline
            raise _RetryableError(REASON_TIMEOUT) from None
        finally:
            with self._lock:
                self._futures.discard(fut)

    async def _attempt(self, kwargs: dict[str, Any]) -> bytes:
        """One request with a total deadline; the raw body (read in full by the library before it returns)."""
        create = self._client.chat.completions.with_raw_response.create
        try:
            raw = await asyncio.wait_for(create(**kwargs), self.config.timeout_s)
        except asyncio.TimeoutError:
            raise _RetryableError(REASON_TIMEOUT) from None
        except openai.APITimeoutError:
            raise _RetryableError(REASON_TIMEOUT) from None
        except openai.APIStatusError as err:
            raise self._status_error(err) from None
        except openai.APIConnectionError as err:
            raise _RetryableError(REASON_TRUNCATED if _was_cut_off(err) else REASON_CONNECTION) from None
        body = raw.http_response.content
        if len(body) > MAX_RESPONSE_BYTES:
            raise TeacherError(REASON_MALFORMED_RESPONSE, f"response over {MAX_RESPONSE_BYTES} bytes")
        return body

    def _status_error(self, err: openai.APIStatusError) -> Exception:
        code = err.status_code
        wait = retry_after_seconds(err.response.headers)
        if code >= 500:
            return _RetryableError(REASON_HTTP_5XX, wait)
        if code == 429:
            return _RetryableError(REASON_RATE_LIMITED, wait)
        if code == 408:
            return _RetryableError(REASON_TIMEOUT, wait)
        self._count(REASON_HTTP_4XX)
        return TeacherError(REASON_HTTP_4XX, f"status {code} from {self.config.base_url}")


async def _build(config: TeacherConfig) -> openai.AsyncOpenAI:
    return make_async_client(config, config.timeout_s)  # made on the loop that will use its connections


def _was_cut_off(err: BaseException) -> bool:
    """Whether a connection error is a body that ended early (Content-Length or chunking not honoured)."""
    seen: BaseException | None = err
    for _ in range(8):  # the library wraps the transport's error; a short walk down the chain finds it
        if seen is None:
            return False
        text = f"{type(seen).__name__}: {seen}"
        if any(hint in text for hint in _TRUNCATION_HINTS):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _message_content(raw: bytes) -> str | None:
    """``choices[0].message.content``; None for JSON of another shape; a cut-off body (not JSON) is retried."""
    try:
        body = json.loads(raw.decode("utf-8", "replace"))
    except json.JSONDecodeError:
        raise _RetryableError(REASON_TRUNCATED) from None
    try:
        content = body["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError):
        return None
    return content if isinstance(content, str) else None
