"""The programmatic teacher and the reply parser of the OpenAI-compatible teacher."""

from __future__ import annotations

import json

import pytest

from verl_ext.augment.config import TeacherConfig
from verl_ext.augment.parser import Candidate
from verl_ext.augment.teacher import OpenAITeacher, ProgrammaticTeacher, Verdict, build_teacher
from verl_ext.augment.teacher.reply import extract_json_object, verdict_from_reply
from verl_ext.tasks import arithmetic


def _cand(text: str, parent: str = "What is 3 + 4?") -> Candidate:
    return Candidate(parent_id=1, text=text, difficulty=1.0, raw=text, parent_text=parent)


def test_programmatic_accepts_and_solves() -> None:
    v = ProgrammaticTeacher().validate(_cand("Sure! What is 12 + 7 * 3? Good luck."))
    assert v.accepted and v.clean_problem == "What is 12 + 7 * 3?" and v.answer == "33"
    parent = arithmetic.difficulty(arithmetic.parse_problem("What is 3 + 4?"))
    child = arithmetic.difficulty(arithmetic.parse_problem("What is 12 + 7 * 3?"))
    assert v.difficulty == pytest.approx(min(1.33, max(0.75, child / parent)))


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("What is 3 + ?", "malformed"),
        ("What is __import__('os')?", "malformed"),
        ("Compute 3 + 4.", "malformed"),
        ("What is 1 + 2? What is 3 + 5?", "multiple_problems"),
        ("What is 3+4?", "copy_of_parent"),
        ("What is 1 + 2 + 3 + 4 + 5 + 6 + 7?", "malformed"),
    ],
)
def test_programmatic_rejects(text: str, reason: str) -> None:
    v = ProgrammaticTeacher().validate(_cand(text))
    assert not v.accepted and v.reason == reason


def test_programmatic_without_parsable_parent_has_no_difficulty() -> None:
    v = ProgrammaticTeacher().validate(_cand("What is 2 * 5?", parent="not arithmetic"))
    assert v.accepted and v.answer == "10" and v.difficulty is None


def test_build_teacher() -> None:
    assert isinstance(build_teacher(TeacherConfig()), ProgrammaticTeacher)
    cfg = TeacherConfig(backend="openai", model="m", base_url="http://127.0.0.1:9/v1")
    teacher = build_teacher(cfg)
    assert isinstance(teacher, OpenAITeacher)
    teacher.close()


def test_api_key_is_optional(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HEAPA_TEST_KEY", raising=False)
    teacher = OpenAITeacher(TeacherConfig(backend="openai", model="m", api_key_env="HEAPA_TEST_KEY"))
    teacher.close()  # a local vLLM teacher needs no key: building one without it works


def test_request_sends_sampling_fields_only_when_set() -> None:
    teacher = OpenAITeacher(TeacherConfig(backend="openai", model="m", json_mode=False))
    try:
        kwargs = teacher.request(_cand("What is 1 + 1?"))
        assert set(kwargs) == {"model", "messages"}  # hosted reasoning models reject temperature / max_tokens
    finally:
        teacher.close()
    teacher = OpenAITeacher(TeacherConfig(backend="openai", model="m", temperature=0.0, max_tokens=64,
                                          extra_body={"max_completion_tokens": 99}))
    try:
        kwargs = teacher.request(_cand("What is 1 + 1?"))
        assert kwargs["temperature"] == 0.0 and kwargs["max_tokens"] == 64
        assert kwargs["response_format"] == {"type": "json_object"}
        assert kwargs["extra_body"] == {"max_completion_tokens": 99}
    finally:
        teacher.close()


def test_over_long_answers_are_rejected() -> None:
    reply = json.dumps({"clean": "Q", "solvable": True, "answer": "7" * 600, "difficulty": 1.0})
    assert verdict_from_reply(reply, 100, 512).reason == "answer_too_long"
    assert verdict_from_reply(reply, 100, 600).accepted



@pytest.mark.parametrize(
    "reply",
    [
        '{"clean": "Q", "solvable": true, "answer": "5", "difficulty": 1.1}',
        '```json\n{"clean": "Q", "solvable": true, "answer": 5, "difficulty": "1.1"}\n```',
        'Here you go: {"clean": "Q", "solvable": "true", "answer": "5", "difficulty": 1.1} hope it helps {',
        '<think>maybe {"clean": "X"}</think>{"clean": "Q", "solvable": true, "answer": "5", "difficulty": 1.1}',
        '{not json} {"clean": "Q", "solvable": true, "answer": "5", "difficulty": 1.1}',
    ],
)
def test_reply_variants_accepted(reply: str) -> None:
    assert verdict_from_reply(reply, 100) == Verdict.accept("Q", "5", 1.1)


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        ("no json here", "malformed_json"),
        ('{"clean": "Q", "answer": "5"}', "malformed_json"),
        ('{"clean": 3, "solvable": true, "answer": "5"}', "malformed_json"),
        ("[1, 2]", "malformed_json"),
        ('{"clean": "Q", "solvable": false, "answer": "5"}', "unsolvable"),
        ('{"clean": "Q", "solvable": true, "answer": ""}', "no_answer"),
        ('{"clean": "Q", "solvable": true}', "no_answer"),
        ('{"clean": "  ", "solvable": true, "answer": "5"}', "empty_clean"),
        (json.dumps({"clean": "Q" * 101, "solvable": True, "answer": "5"}), "too_long"),
    ],
)
def test_reply_rejections(reply: str, reason: str) -> None:
    v = verdict_from_reply(reply, 100)
    assert not v.accepted and v.reason == reason


def test_reply_difficulty_is_clamped_or_missing() -> None:
    assert verdict_from_reply('{"clean":"Q","solvable":true,"answer":"1","difficulty":9}', 10).difficulty == 1.33
    assert verdict_from_reply('{"clean":"Q","solvable":true,"answer":"1","difficulty":"hard"}', 10).difficulty is None
    assert verdict_from_reply('{"clean":"Q","solvable":true,"answer":"1","difficulty":NaN}', 10).difficulty is None


def test_extract_json_is_bounded_on_brace_floods() -> None:
    assert extract_json_object("{" * 100_000) is None
    assert extract_json_object('{"a": ' * 50_000) is None  # deep nesting: RecursionError is contained
    assert extract_json_object('x {"a": {"b": [1]}} y') == {"a": {"b": [1]}}
    # refused before decoding (no RecursionError near the stack limit); braces inside strings do not count
    assert extract_json_object('{"a": ' * 40 + "1" + "}" * 40) is None
    assert extract_json_object('{"clean": "' + "{[" * 500 + '", "solvable": true}') == {
        "clean": "{[" * 500, "solvable": True}


def test_verdict_dict_round_trip() -> None:
    v = Verdict.accept("Q", "5", 0.9)
    assert Verdict.from_dict(json.loads(json.dumps(v.to_dict()))) == v
