"""Config validation names the field; parent selection is deterministic under a seeded generator."""

from __future__ import annotations

import random

import pytest

from verl_ext.augment.config import AugmentConfig, TeacherConfig, select_parents
from verl_ext.augment.protocol import TAG_END, AugmentPrompt, build_messages


def test_defaults_are_valid() -> None:
    cfg = AugmentConfig()
    assert cfg.stop == [TAG_END] and cfg.parent_selection == "all"
    assert isinstance(cfg.prompt_spec(), AugmentPrompt)
    assert build_messages("What is 1 + 2?", cfg.prompt_spec())[-1]["content"].count("What is 1 + 2?") == 1
    assert TeacherConfig().backend == "programmatic"


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"parent_selection": "random"}, "parent_selection"),
        ({"band_low": 0.8, "band_high": 0.2}, "band_low must be <= band_high"),
        ({"num_per_prompt": 0}, "num_per_prompt"),
        ({"max_new_tokens": -1}, "max_new_tokens"),
        ({"top_p": 0.0}, "top_p"),
        ({"stop": "<END>"}, "stop"),
        ({"num_parents": -1}, "num_parents"),
        ({"shots": [{"original": "a"}]}, "shots\\[0\\]"),
    ],
)
def test_augment_config_errors_name_the_field(kwargs: dict, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        AugmentConfig(**kwargs)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"backend": "gpt"}, "backend"),
        ({"backend": "openai"}, "model"),
        ({"backend": "openai", "model": "m", "base_url": "ftp://x"}, "base_url"),
        ({"timeout_s": 0}, "timeout_s"),
        ({"max_retries": -1}, "max_retries"),
        ({"concurrency": 0}, "concurrency"),
        ({"prompt": " "}, "prompt"),
        ({"timeout_s": "abc"}, "teacher.timeout_s must be a number > 0, got 'abc'"),
        ({"timeout_s": "nan"}, "teacher.timeout_s must be a number > 0, got 'nan'"),
        ({"max_retries": 1.5}, "teacher.max_retries must be an integer >= 0, got 1.5"),
        ({"concurrency": True}, "teacher.concurrency must be an integer >= 1, got True"),
        ({"json_mode": "maybe"}, "teacher.json_mode must be true or false, got 'maybe'"),
        ({"temperature": -1}, "temperature"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"max_answer_chars": 0}, "max_answer_chars"),
        ({"extra_body": "x"}, "teacher.extra_body must be a mapping, got 'x'"),
        ({"probe_timeout_s": -1}, "probe_timeout_s"),
    ],
)
def test_teacher_config_errors_name_the_field(kwargs: dict, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        TeacherConfig(**kwargs)


def test_values_are_converted_to_the_declared_types() -> None:
    cfg = TeacherConfig(timeout_s="5", max_retries=2.0, model=7, temperature=None)
    assert cfg.timeout_s == 5.0 and cfg.max_retries == 2 and cfg.model == "7" and cfg.temperature is None
    assert AugmentConfig(num_parents="3", temperature=1).num_parents == 3
    with pytest.raises(ValueError, match=r"augmentation\.top_p must be a number in \(0, 1\], got 'high'"):
        AugmentConfig(top_p="high")


def test_from_dict_rejects_unknown_keys() -> None:
    assert AugmentConfig.from_dict({"num_per_prompt": 2}).num_per_prompt == 2
    with pytest.raises(ValueError, match="num_per_promt"):
        AugmentConfig.from_dict({"num_per_promt": 2})
    with pytest.raises(ValueError, match="api_key"):
        TeacherConfig.from_dict({"api_key": "secret"})


def test_select_parents_band_and_cap() -> None:
    rates = {"a": 0.0, "b": 0.5, "c": None, "d": 1.0, "e": 0.25}
    assert select_parents(AugmentConfig(), rates, random.Random(0)) == ["a", "b", "c", "d", "e"]
    band = AugmentConfig(parent_selection="band", band_low=0.1, band_high=0.9)
    assert select_parents(band, rates, random.Random(0)) == ["b", "e"]
    capped = AugmentConfig(num_parents=2)
    first = select_parents(capped, rates, random.Random(3))
    assert len(first) == 2 and first == select_parents(capped, rates, random.Random(3))
