"""A teacher backed by any OpenAI-compatible chat-completions server (vLLM, SGLang, OpenAI, ...).

Standard library only (``urllib``): the project adds no HTTP dependency for one POST. Transport faults are
retried with exponential backoff (timeouts, connection errors, 5xx, 408/429 which mean "try later"); other 4xx
are the caller's mistake and fail at once. After the last retry the fault is raised as ``TeacherError`` so the
validator counts it. The API key is read from the environment variable NAMED in the config and never logged.
"""

from __future__ import annotations

import http.client
import ipaddress
import json
import logging
import os
import random
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections import Counter
from typing import Any

from verl_ext.augment.config import TeacherConfig
from verl_ext.augment.parser import Candidate
from verl_ext.augment.teacher.base import TeacherError, Verdict
from verl_ext.augment.teacher.reply import verdict_from_reply

logger = logging.getLogger(__name__)

REASON_TIMEOUT = "timeout"
REASON_CONNECTION = "connection"
REASON_HTTP_5XX = "http_5xx"
REASON_HTTP_4XX = "http_4xx"
REASON_RATE_LIMITED = "http_429"
REASON_CLOSED = "closed"
REASON_MALFORMED_RESPONSE = "malformed_response"

MAX_RESPONSE_BYTES = 4 * 1024 * 1024
_RETRY_STATUS = frozenset({408, 429})


class _RetryableError(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _is_loopback(url: str) -> bool:
    host = urllib.parse.urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def render_user_message(candidate: Candidate) -> str:
    """The user turn: original and generation, concatenated (never ``str.format``: '$' and '{' pass unchanged)."""
    return "ORIGINAL:\n" + candidate.parent_text.strip() + "\n\nGENERATION:\n" + candidate.text.strip()


class OpenAITeacher:
    """Validates candidates by asking a chat model for ``{clean, solvable, answer, difficulty}``.

    Thread-safe: the validator's workers share one instance; a semaphore caps simultaneous requests at
    ``config.concurrency`` and ``close()`` interrupts backoff sleeps so shutdown is prompt.
    """

    def __init__(self, config: TeacherConfig) -> None:
        self.config = config
        self._api_key: str | None = None
        if config.api_key_env:
            self._api_key = os.environ.get(config.api_key_env)
            if not self._api_key:
                raise ValueError(
                    f"TeacherConfig.api_key_env names environment variable '{config.api_key_env}', which is not set"
                )
        self._url = config.base_url.rstrip("/") + "/chat/completions"
        # Loopback servers bypass any http(s)_proxy from the environment; remote ones honour it.
        handlers = [urllib.request.ProxyHandler({})] if _is_loopback(self._url) else []
        self._opener = urllib.request.build_opener(*handlers)
        self._slots = threading.BoundedSemaphore(config.concurrency)
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self.counts: Counter[str] = Counter()

    # -- public -------------------------------------------------------------------------------------------
    def validate(self, candidate: Candidate) -> Verdict:
        content = self._complete(self._body(candidate))
        if content is None:
            return Verdict.reject(REASON_MALFORMED_RESPONSE)
        return verdict_from_reply(content, self.config.max_clean_chars)

    def close(self) -> None:
        self._closed.set()

    def metrics(self) -> dict[str, float]:
        with self._lock:
            return {f"teacher/http/{k}": float(v) for k, v in self.counts.items()}

    # -- internals ----------------------------------------------------------------------------------------
    def _count(self, key: str) -> None:
        with self._lock:
            self.counts[key] += 1

    def _body(self, candidate: Candidate) -> bytes:
        cfg = self.config
        body: dict[str, Any] = {
            "model": cfg.model,
            "messages": [
                {"role": "system", "content": cfg.prompt},
                {"role": "user", "content": render_user_message(candidate)},
            ],
            "temperature": cfg.temperature,
            "max_tokens": cfg.max_tokens,
        }
        if cfg.json_mode:
            body["response_format"] = {"type": "json_object"}
        return json.dumps(body).encode("utf-8")

    def _backoff(self, attempt: int) -> float:
        base = min(self.config.max_backoff_s, self.config.backoff_s * (2**attempt))
        # Jitter spreads simultaneous retries of many workers; timing only, so an unseeded generator is fine.
        return base * (1.0 + 0.25 * random.random())

    def _complete(self, data: bytes) -> str | None:
        """POST with retries; the message content, None when the body is not a chat completion."""
        last = REASON_CONNECTION
        for attempt in range(self.config.max_retries + 1):
            if self._closed.is_set():
                raise TeacherError(REASON_CLOSED)
            try:
                with self._slots:
                    raw = self._post_once(data)
                self._count("ok")
                return _message_content(raw)
            except _RetryableError as err:
                last = err.reason
                self._count(err.reason)
            if attempt < self.config.max_retries:
                self._count("retries")
                if self._closed.wait(self._backoff(attempt)):
                    raise TeacherError(REASON_CLOSED)
        raise TeacherError(last, f"gave up after {self.config.max_retries + 1} attempts")

    def _post_once(self, data: bytes) -> bytes:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self._api_key:
            headers["Authorization"] = "Bearer " + self._api_key
        request = urllib.request.Request(self._url, data=data, headers=headers, method="POST")
        try:
            with self._opener.open(request, timeout=self.config.timeout_s) as response:
                raw = response.read(MAX_RESPONSE_BYTES + 1)
        except urllib.error.HTTPError as err:
            code = err.code
            err.close()
            if code >= 500:
                raise _RetryableError(REASON_HTTP_5XX) from err
            if code in _RETRY_STATUS:
                raise _RetryableError(REASON_RATE_LIMITED if code == 429 else REASON_TIMEOUT) from err
            self._count(REASON_HTTP_4XX)
            raise TeacherError(REASON_HTTP_4XX, f"status {code} from {self._url}") from err
        except TimeoutError as err:
            raise _RetryableError(REASON_TIMEOUT) from err
        except urllib.error.URLError as err:
            timed_out = isinstance(err.reason, TimeoutError)
            raise _RetryableError(REASON_TIMEOUT if timed_out else REASON_CONNECTION) from err
        except (http.client.HTTPException, ConnectionError, OSError) as err:
            raise _RetryableError(REASON_CONNECTION) from err
        if len(raw) > MAX_RESPONSE_BYTES:
            raise TeacherError(REASON_MALFORMED_RESPONSE, f"response over {MAX_RESPONSE_BYTES} bytes")
        return raw


def _message_content(raw: bytes) -> str | None:
    """``choices[0].message.content`` of a chat completion, or None when the body has another shape."""
    try:
        body = json.loads(raw.decode("utf-8", "replace"))
        content = body["choices"][0]["message"]["content"]
    except (json.JSONDecodeError, KeyError, IndexError, TypeError):
        return None
    return content if isinstance(content, str) else None
