"""Seed rows: verl parquet/jsonl rows, benchmark jsonl with a key mapping, and errors that name file/row/field."""

from __future__ import annotations

import json
import logging
import re

import pytest

from verl_ext.adapters.rows import RowError, RowFormat, child_extra, load_rows, to_verl_row
from verl_ext.pool import QueryPool

SUFFIX = "Let's think step by step and output the final answer within \\boxed{}."


def test_parquet_rows_load_into_the_pool(train_parquet):
    rows = load_rows(train_parquet)
    assert len(rows) == 40
    assert rows.prompts[3] == [{"role": "user", "content": "What is 3 + 3?"}]
    assert rows.answers[3] == "6" and rows.data_sources[3] == "arith"
    assert rows.extras[3] == {"ability": "math", "extra_info": {"index": 3, "split": "train"}}
    pool = QueryPool()
    ids = pool.add_seeds_bulk(**rows.pool_kwargs())
    assert ids == list(range(40))
    json.dumps(pool.state_dict())  # everything the rows put into the pool is JSON-safe


def test_jsonl_and_json_array_and_list_of_files(make_rows, write_parquet, write_jsonl, tmp_path):
    a = write_parquet(make_rows(5), "a.parquet")
    b = write_jsonl(make_rows(3, start=5), "b.jsonl")
    c = tmp_path / "c.json"
    c.write_text(json.dumps(make_rows(2, start=8)))
    rows = load_rows([a, str(b), c])
    assert len(rows) == 10 and rows.answers[9] == str(9 + 9 % 7)
    assert len(load_rows([a, b], limit=6)) == 6


def test_roundtrip_to_the_verl_row(make_rows, write_jsonl):
    src = make_rows(2)
    src[1]["agent_name"] = "tool_agent"  # an extra column survives
    src[1]["reward_model"]["style"] = "model"  # and a non-default reward_model key
    rows = load_rows(write_jsonl(src))
    for i in range(2):
        row = to_verl_row(i, rows.prompts[i], rows.answers[i], rows.data_sources[i], rows.extras[i])
        assert row == src[i]


def test_child_rows_inherit_ability_and_columns(make_rows, write_jsonl):
    src = make_rows(1)
    src[0].update(ability="algebra", agent_name="tool_agent")
    src[0]["extra_info"]["tools_kwargs"] = {"x": 1}
    rows = load_rows(write_jsonl(src))
    extra = child_extra(rows.extras[0], parent_index=0, origin="augmented")
    row = to_verl_row(5, "What is 2 + 9?", "11", "arith", extra)
    assert row == {"data_source": "arith", "prompt": [{"role": "user", "content": "What is 2 + 9?"}],
                   "ability": "algebra", "agent_name": "tool_agent",
                   "reward_model": {"style": "rule", "ground_truth": "11"},
                   "extra_info": {"parent_index": 0, "origin": "augmented", "index": 5}}
    assert to_verl_row(6, "q", "1", "s", None)["ability"] == "math"


def test_benchmark_jsonl_with_key_mapping_and_suffix(math500):
    fmt = RowFormat(prompt_key="problem", answer_key="answer", instruction_suffix=SUFFIX, extra_keys=("level",))
    rows = load_rows(math500, fmt)
    assert len(rows) == 500
    assert set(rows.data_sources) == {"math500"}  # the file stem when rows carry none
    first = json.loads(math500.read_text().splitlines()[0])
    assert rows.prompts[0] == [{"role": "user", "content": first["problem"] + " " + SUFFIX}]
    assert rows.answers[0] == first["answer"]
    assert rows.extras[0] == {"ability": "math", "extra_info": {"level": first["level"]}}
    assert load_rows(math500, RowFormat(prompt_key="problem", answer_key="answer", data_source="m5"),
                     limit=2).data_sources == ["m5", "m5"]


def test_numeric_benchmark_answers_become_strings(write_jsonl):
    path = write_jsonl([{"q": "a?", "a": 204}, {"q": "b?", "a": 2.5}, {"q": "c?", "a": 3.0}], "aime.jsonl")
    rows = load_rows(path, RowFormat(prompt_key="q", answer_key="a"))
    assert rows.answers == ["204", "2.5", "3"]


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda r: r["reward_model"].pop("ground_truth"), "field 'reward_model.ground_truth' missing"),
        (lambda r: r.pop("reward_model"), "field 'reward_model.ground_truth' missing"),
        (lambda r: r.pop("data_source"), "field 'data_source' missing"),
        (lambda r: r.update(prompt="What is 1?"), "field 'prompt' must be a list of chat messages"),
        (lambda r: r["prompt"][0].pop("role"), "field 'prompt[0].role' missing"),
        (lambda r: r["reward_model"].update(ground_truth=[1, 2]), "field 'reward_model.ground_truth' must be"),
        (lambda r: r.update(extra_info="x"), "field 'extra_info' must be an object"),
    ],
)
def test_bad_verl_rows_name_file_row_and_field(make_rows, write_jsonl, mutate, message):
    rows = make_rows(20)
    mutate(rows[17])
    path = write_jsonl(rows, "train.jsonl")
    with pytest.raises(RowError) as err:
        load_rows(path)
    assert f"train.jsonl row 17 (line 18): {message}" in str(err.value)


def test_bad_parquet_row_is_named(make_rows, write_parquet):
    rows = make_rows(20)
    rows[17]["reward_model"] = {"style": "rule", "ground_truth": None}
    path = write_parquet(rows, "train.parquet")
    with pytest.raises(RowError, match=r"train\.parquet row 17: field 'reward_model\.ground_truth' missing"):
        load_rows(path)


def test_all_bad_rows_are_counted_and_the_first_twenty_listed(write_jsonl):
    path = write_jsonl([{"problem": "x?"} for _ in range(23)], "bench.jsonl")
    with pytest.raises(RowError) as err:
        load_rows(path, RowFormat(prompt_key="problem", answer_key="answer"))
    text = str(err.value)
    assert text.startswith("23 bad row(s)") and "bench.jsonl row 0 (line 1): field 'answer' missing" in text
    assert "row 19 (line 20)" in text and "row 20 (line 21)" not in text and "... and 3 more" in text


def test_a_bad_json_line_does_not_hide_the_other_row_errors(make_rows, tmp_path):
    rows = make_rows(6)
    rows[4]["prompt"][0]["content"] = "  "
    del rows[2]["reward_model"]
    lines = [json.dumps(r) for r in rows]
    lines[1] = "{oops"
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(lines[:2]) + "\n\n" + "\n".join(lines[2:]) + "\n")  # a blank line 3
    with pytest.raises(RowError) as err:
        load_rows(bad)
    text = str(err.value)
    assert text.startswith("3 bad row(s)")
    assert "bad.jsonl row 1 (line 2): invalid JSON" in text
    assert "bad.jsonl row 2 (line 4): field 'reward_model.ground_truth' missing" in text
    assert "bad.jsonl row 4 (line 6): field 'prompt[0].content' is empty or whitespace" in text


def test_invalid_json_and_bad_files(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('[{"a": 1},')
    with pytest.raises(RowError, match=r"bad\.json: invalid JSON"):
        load_rows(bad)
    with pytest.raises(FileNotFoundError, match="nope.parquet"):
        load_rows(tmp_path / "nope.parquet")
    other = tmp_path / "x.csv"
    other.write_text("a,b\n")
    with pytest.raises(ValueError, match="unsupported data file"):
        load_rows(other)


@pytest.mark.parametrize(
    ("prompt", "message"),
    [
        ([{"role": "user", "content": ""}], "field 'prompt[0].content' is empty or whitespace"),
        ([{"role": "system", "content": "Be brief."}, {"role": "user", "content": " \n\t"}],
         "field 'prompt[1].content' is empty or whitespace"),
        ([{"role": "system", "content": "Be brief."}], "field 'prompt' has no user message"),
        ([], "field 'prompt' is an empty message list"),
    ],
)
def test_empty_contents_and_prompts_without_a_user_turn_are_refused(make_rows, write_jsonl, prompt, message):
    rows = make_rows(3)
    rows[2]["prompt"] = prompt
    with pytest.raises(RowError, match=r"train\.jsonl row 2 \(line 3\): " + re.escape(message)):
        load_rows(write_jsonl(rows))


def test_whitespace_only_benchmark_question_is_refused(write_jsonl):
    path = write_jsonl([{"q": "a?", "a": 1}, {"q": "   ", "a": 2}], "aime.jsonl")
    with pytest.raises(RowError, match=r"aime\.jsonl row 1 \(line 2\): field 'q' is empty"):
        load_rows(path, RowFormat(prompt_key="q", answer_key="a"))


def _with_repeats(make_rows):
    rows = make_rows(8)
    rows[5]["prompt"] = [dict(rows[1]["prompt"][0])]
    rows[7]["prompt"] = [{"role": "user", "content": rows[1]["prompt"][0]["content"] + "  "}]  # same once stripped
    rows[7]["reward_model"]["ground_truth"] = "999"  # a different answer is still the same prompt
    return rows


def test_duplicate_prompts_warn_by_default_naming_rows(make_rows, write_jsonl, caplog):
    a = write_jsonl(make_rows(2), "a.jsonl")
    b = write_jsonl(_with_repeats(make_rows), "b.jsonl")
    with caplog.at_level(logging.WARNING, logger="verl_ext.adapters.rows"):
        rows = load_rows([a, b])
    assert len(rows) == 10  # kept: each copy is its own record
    text = caplog.text
    # b.jsonl rows 0 and 1 repeat a.jsonl's (make_rows restarts at 0); b rows 5 and 7 repeat it again
    assert "4 of 10 rows repeat an earlier row's prompt" in text
    assert "b.jsonl row 0 repeats" in text and "a.jsonl row 0" in text
    assert "b.jsonl row 5 repeats" in text and "b.jsonl row 7 repeats" in text


def test_duplicate_policies_error_drop_allow(make_rows, write_jsonl, caplog):
    path = write_jsonl(_with_repeats(make_rows), "train.jsonl")
    with pytest.raises(RowError) as err:
        load_rows(path, RowFormat(duplicates="error"))
    assert "2 of 8 rows repeat" in str(err.value) and "train.jsonl row 5 repeats " in str(err.value)
    assert "heapa.rows.duplicates" in str(err.value)
    dropped = load_rows(path, RowFormat(duplicates="drop"))
    assert len(dropped) == 6 and dropped.answers[5] == str(6 + 6 % 7)  # the first copy stays, in order
    caplog.clear()  # the drop above logs at INFO, which the project's loggers now show
    with caplog.at_level(logging.WARNING, logger="verl_ext.adapters.rows"):
        assert len(load_rows(path, RowFormat(duplicates="allow"))) == 8
    assert "repeat" not in caplog.text
    with pytest.raises(ValueError, match=r"heapa.rows.duplicates must be one of"):
        RowFormat(duplicates="sometimes")


def test_row_format_validation():
    with pytest.raises(ValueError, match=r"heapa.rows: unknown keys \[.prompt.\]; known: \[.ability."):
        RowFormat.from_dict({"prompt": "x"})
    assert RowFormat.from_dict({"extra_keys": ["a"]}).extra_keys == ("a",)
