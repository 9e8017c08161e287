"""Teacher backends behind one interface (``validate(candidate) -> Verdict``), built from ``TeacherConfig``.

The HTTP backend (``OpenAITeacher``, ``probe_teacher``) is imported on first use: the ``openai`` client library
takes about two seconds to import, which every process reading the config would otherwise pay.
"""

from __future__ import annotations

import importlib
from typing import Any

from verl_ext.augment.config import TeacherConfig
from verl_ext.augment.teacher.base import REASON_ACCEPTED, Teacher, TeacherError, Verdict
from verl_ext.augment.teacher.programmatic import ProgrammaticTeacher

__all__ = [
    "REASON_ACCEPTED",
    "OpenAITeacher",
    "ProgrammaticTeacher",
    "Teacher",
    "TeacherError",
    "TeacherUnreachableError",
    "Verdict",
    "build_teacher",
    "probe_teacher",
]
_LAZY = {"OpenAITeacher": "openai_compat", "TeacherUnreachableError": "probe", "probe_teacher": "probe"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def build_teacher(config: TeacherConfig) -> Teacher:
    """The backend named by ``config.backend`` (validated by the config)."""
    if config.backend == "programmatic":
        return ProgrammaticTeacher()
    if config.backend == "openai":
        from verl_ext.augment.teacher.openai_compat import OpenAITeacher

        return OpenAITeacher(config)
    raise ValueError(f"TeacherConfig.backend={config.backend!r} has no builder")
