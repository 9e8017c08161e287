"""Teacher backends behind one interface (``validate(candidate) -> Verdict``), built from ``TeacherConfig``."""

from __future__ import annotations

from verl_ext.augment.config import TeacherConfig
from verl_ext.augment.teacher.base import REASON_ACCEPTED, Teacher, TeacherError, Verdict
from verl_ext.augment.teacher.openai_compat import OpenAITeacher
from verl_ext.augment.teacher.probe import TeacherUnreachableError, probe_teacher
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


def build_teacher(config: TeacherConfig) -> Teacher:
    """The backend named by ``config.backend`` (validated by the config)."""
    if config.backend == "programmatic":
        return ProgrammaticTeacher()
    if config.backend == "openai":
        return OpenAITeacher(config)
    raise ValueError(f"TeacherConfig.backend={config.backend!r} has no builder")
