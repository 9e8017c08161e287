"""On-policy query augmentation (HeaPA §5): request protocol, candidate parsing, pre-teacher filters, teacher
backends and the asynchronous validator. Pure Python: no verl, ray or torch."""

from verl_ext.augment.config import AugmentConfig, TeacherConfig, select_parents
from verl_ext.augment.filters import CandidateFilter, SeenHashes, normalise, text_hash
from verl_ext.augment.parser import Candidate, Rejection, parse_candidate
from verl_ext.augment.teacher import ProgrammaticTeacher, Teacher, TeacherError, Verdict, build_teacher
from verl_ext.augment.validator import AsyncValidator

__all__ = [
    "AsyncValidator",
    "AugmentConfig",
    "Candidate",
    "CandidateFilter",
    "OpenAITeacher",
    "ProgrammaticTeacher",
    "Rejection",
    "SeenHashes",
    "Teacher",
    "TeacherConfig",
    "TeacherError",
    "Verdict",
    "build_teacher",
    "normalise",
    "parse_candidate",
    "select_parents",
    "text_hash",
]


def __getattr__(name: str):
    if name == "OpenAITeacher":  # imported on first use (the openai library is slow to import)
        from verl_ext.augment.teacher.openai_compat import OpenAITeacher

        return OpenAITeacher
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
