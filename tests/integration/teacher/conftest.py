"""Fixtures of the teacher tests: a running chat server and teachers closed at the end. The server and the
helpers live in ``_teacher_http.py``; with ``--import-mode=importlib`` (no ``__init__.py``) this conftest puts
the directory on ``sys.path`` so the test modules can import it."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

from _teacher_http import ChatServer  # noqa: E402  (needs the path above)

from verl_ext.augment.config import TeacherConfig  # noqa: E402
from verl_ext.augment.teacher import OpenAITeacher  # noqa: E402


@pytest.fixture
def server() -> Iterator[ChatServer]:
    srv = ChatServer()
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()
    thread.join(2)


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
