"""examples/data_preprocess/eval_sets.py on the real MATH500 / AIME24 / AIME25 files and on synthetic rows in the
hub layouts of AMC23, Minerva Math, OlympiadBench and GPQA-Diamond; the rows load with verl's ``RLHFDataset``."""

from __future__ import annotations

import json
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import _common
import eval_sets
import gpqa


def read(path):
    return pq.read_table(path).to_pylist()


def source_rows(path):
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


@pytest.mark.parametrize("name,count", [("math500", 500), ("aime24", 30), ("aime25", 30)])
def test_real_benchmarks_convert_exactly(name, count, bench_file, tmp_path):
    src = bench_file(name)
    assert eval_sets.main([name, "--local", str(src), "--out-dir", str(tmp_path), "--strict"]) == 0
    rows, raw = read(tmp_path / f"{name}.parquet"), source_rows(src)
    assert len(rows) == len(raw) == count
    for i, (row, orig) in enumerate(zip(rows, raw)):
        assert row["data_source"] == name and row["ability"] == "math"
        assert row["reward_model"] == {"style": "rule", "ground_truth": str(orig["answer"])}  # never mangled
        assert row["extra_info"]["index"] == i and row["extra_info"]["problem"] == orig["problem"]
        assert row["prompt"] == [{"role": "user", "content": f"{orig['problem']} {_common.BOXED_INSTRUCTION}"}]
    report = json.loads((tmp_path / f"{name}.report.json").read_text())
    assert (report["rows_read"], report["rows_written"], report["bad_count"]) == (count, count, 0)


def test_aime24_keeps_leading_zero_answers_and_ids(bench_file, tmp_path):
    src = bench_file("aime24")
    eval_sets.main(["aime24", "--local", str(src), "--out-dir", str(tmp_path), "--template", "dapo"])
    rows, raw = read(tmp_path / "aime24.parquet"), source_rows(src)
    zero_padded = [r["reward_model"]["ground_truth"] for r in rows if r["reward_model"]["ground_truth"].startswith("0")]
    assert zero_padded and all(len(a) == 3 for a in zero_padded)  # "025" stays "025"
    assert [r["extra_info"]["source_id"] for r in rows] == [str(o["id"]) for o in raw]
    content = rows[0]["prompt"][0]["content"]
    assert content.startswith(_common.DAPO_PREFIX) and content.endswith(_common.DAPO_SUFFIX)
    assert _common.strip_dapo_template(content) == (raw[0]["problem"], True)


def test_rows_load_with_verl_rlhf_dataset(bench_file, tmp_path, tiny_assets):
    from omegaconf import OmegaConf
    from transformers import AutoTokenizer
    from verl.utils.dataset.rl_dataset import RLHFDataset

    eval_sets.main(["aime25", "--local", str(bench_file("aime25")), "--out-dir", str(tmp_path)])
    tok = AutoTokenizer.from_pretrained(tiny_assets / "model")
    config = OmegaConf.create({"cache_dir": str(tmp_path / "cache"), "filter_overlong_prompts": False,
                               "max_prompt_length": 4096})
    ds = RLHFDataset(str(tmp_path / "aime25.parquet"), tok, config)
    assert len(ds) == 30
    item = ds[3]
    assert item["data_source"] == "aime25" and item["reward_model"]["ground_truth"] == "117"
    assert item["extra_info"]["index"] == 3


def test_bad_rows_are_reported_with_file_row_reason(write_jsonl, tmp_path, capsys):
    src = write_jsonl([{"problem": "1+1?", "answer": "2"}, {"problem": "  ", "answer": "3"}, [1, 2],
                       {"problem": "no answer"}, {"question": "bool?", "answer": True},
                       {"problem": "ok", "answer": 7}, "{not json"], "math500.jsonl")
    assert eval_sets.main(["math500", "--local", str(src), "--out-dir", str(tmp_path / "o")]) == 0
    report = json.loads((tmp_path / "o" / "math500.report.json").read_text())
    assert report["rows_read"] == 7 and report["rows_written"] == 2 and report["bad_count"] == 5
    reasons = {b["row"]: b["reason"] for b in report["bad_rows"]}
    assert all(b["file"] == str(src) for b in report["bad_rows"])
    assert reasons[1] == "field 'problem' is empty" and "expected an object" in reasons[2]
    assert "no answer field" in reasons[3] and "boolean" in reasons[4] and reasons[6].startswith("invalid JSON")
    assert [r["extra_info"]["index"] for r in read(tmp_path / "o" / "math500.parquet")] == [0, 5]  # ids stay put
    assert "bad 5" in capsys.readouterr().err
    assert eval_sets.main(["math500", "--local", str(src), "--out-dir", str(tmp_path / "s"), "--strict"]) == 2
    assert not (tmp_path / "s" / "math500.parquet").exists()
    assert json.loads((tmp_path / "s" / "math500.report.json").read_text())["bad_count"] == 5


def test_other_math_benchmarks_in_their_hub_layouts(write_jsonl, tmp_path):
    amc = write_jsonl([{"id": 0, "question": "AMC q", "answer": 27.0, "url": "u"}], "amc.jsonl")
    minerva = write_jsonl([{"question": "Minerva q", "answer": "4.5 \\times 10^{3}"}], "minerva.jsonl")
    olympiad = write_jsonl([{"id": 2231, "question": "Find x.", "final_answer": ["$\\frac{1}{2}$"], "context": None,
                             "answer_type": "Numerical", "is_multiple_answer": False},
                            {"id": 2232, "question": "Find all n.", "final_answer": ["$1$", "$2$"],
                             "context": "Let n be a positive integer.", "is_multiple_answer": True}], "ob.jsonl")
    pq.write_table(pa.Table.from_pylist(source_rows(olympiad)), tmp_path / "ob.parquet")
    args = ["amc23", "minerva_math", "olympiadbench", "--out-dir", str(tmp_path / "o"), "--local", f"amc23={amc}",
            "--local", f"minerva_math={minerva}", "--local", f"olympiadbench={tmp_path / 'ob.parquet'}"]
    assert eval_sets.main(args) == 0
    [amc_row] = read(tmp_path / "o" / "amc23.parquet")
    assert amc_row["reward_model"]["ground_truth"] == "27.0" and amc_row["extra_info"]["url"] == "u"
    [minerva_row] = read(tmp_path / "o" / "minerva_math.parquet")
    assert minerva_row["reward_model"]["ground_truth"] == "4.5 \\times 10^{3}"
    one, several = read(tmp_path / "o" / "olympiadbench.parquet")
    assert one["reward_model"]["ground_truth"] == "$\\frac{1}{2}$" and one["extra_info"]["answers"] is None
    assert several["reward_model"]["ground_truth"] == "$1$, $2$" and several["extra_info"]["answers"] == ["$1$", "$2$"]
    assert several["extra_info"]["problem"] == "Let n be a positive integer.\n\nFind all n."
    assert several["extra_info"]["is_multiple_answer"] == "True"


def gpqa_row(i):
    return {"Record ID": f"rec{i}", "Question": f"Question {i}?", "Correct Answer": f"right {i}",
            "Incorrect Answer 1": f"wrong a{i}", "Incorrect Answer 2": f"wrong b{i}",
            "Incorrect Answer 3": f"wrong c{i}", "Subdomain": "Physics"}


def test_gpqa_letters_follow_a_recorded_deterministic_shuffle(write_jsonl, tmp_path):
    rows = [gpqa_row(i) for i in range(40)] + [{**gpqa_row(99), "Incorrect Answer 2": "right 99"}]
    src = write_jsonl(rows, "gpqa.jsonl")
    eval_sets.main(["gpqa_diamond", "--local", str(src), "--out-dir", str(tmp_path / "a")])
    eval_sets.main(["gpqa_diamond", "--local", str(src), "--out-dir", str(tmp_path / "b")])
    eval_sets.main(["gpqa_diamond", "--local", str(src), "--out-dir", str(tmp_path / "c"), "--seed", "1"])
    a, b, c = (read(tmp_path / d / "gpqa_diamond.parquet") for d in "abc")
    assert a == b and len(a) == 40  # the duplicate-choice row is a bad row
    report = json.loads((tmp_path / "a" / "gpqa_diamond.report.json").read_text())
    assert report["bad_rows"][0]["row"] == 40 and "same text" in report["bad_rows"][0]["reason"]
    assert {r["reward_model"]["ground_truth"] for r in a} == set("ABCD")  # the correct answer moves around
    assert [r["reward_model"]["ground_truth"] for r in a] != [r["reward_model"]["ground_truth"] for r in c]
    for row, orig in zip(a, rows):
        info, letter = row["extra_info"], row["reward_model"]["ground_truth"]
        pos = "ABCD".index(letter)
        assert info["choices"][pos] == orig["Correct Answer"] == info["correct_answer_text"]
        assert info["correct_choice"] == letter and info["choice_sources"][pos] == "correct"
        assert sorted(info["choices"]) == sorted(orig[k] for k in (gpqa.CORRECT, *gpqa.INCORRECT))
        assert f"{letter}) {orig['Correct Answer']}" in row["prompt"][0]["content"]
        assert row["ability"] == "science" and info["shuffle_seed"] == 0


def test_hub_path_calls_load_dataset_with_name_config_split(monkeypatch, tmp_path):
    import datasets

    calls = []

    def fake_load_dataset(name, config=None, split=None):
        calls.append((name, config, split))
        return [gpqa_row(0)]

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    assert eval_sets.main(["gpqa_diamond", "--out-dir", str(tmp_path)]) == 0
    assert calls == [("Idavidrein/gpqa", "gpqa_diamond", "train")]
    report = json.loads((tmp_path / "gpqa_diamond.report.json").read_text())
    assert report["source"] == "Idavidrein/gpqa:gpqa_diamond:train"
    monkeypatch.setattr(datasets, "load_dataset", lambda name, config=None, split=None: calls.append(
        (name, config, split)) or [{"problem": "p", "answer": "1"}])
    assert eval_sets.main(["aime25", "--hub", "aime25=yentinglin/aime_2025:train", "--out-dir", str(tmp_path)]) == 0
    assert calls[-1] == ("yentinglin/aime_2025", None, "train")
    with pytest.raises(SystemExit, match="--hub"):
        eval_sets.main(["aime25", "--hub", "aime24=x:train", "--out-dir", str(tmp_path)])


def test_cli_runs_as_a_script(bench_file, tmp_path, repo_dir):
    out = subprocess.run([sys.executable, str(repo_dir / "examples" / "data_preprocess" / "eval_sets.py"), "aime25",
                          "--local", str(bench_file("aime25")), "--out-dir", str(tmp_path)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(tmp_path / "aime25.parquet")
    bad = subprocess.run([sys.executable, str(repo_dir / "examples" / "data_preprocess" / "eval_sets.py"), "aime26"],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode != 0 and "unknown benchmark" in bad.stderr


def test_prepare_then_score_the_source_answers(bench_file, tmp_path):
    """The chain end to end: each source answer, written in a box, scores 1 against the prepared ground truth."""
    from verl_ext.evaluation.cli import main as evaluate

    gens = tmp_path / "gens.jsonl"
    with gens.open("w", encoding="utf-8") as f:
        for name in ("aime24", "aime25"):
            eval_sets.main([name, "--local", str(bench_file(name)), "--out-dir", str(tmp_path / "eval")])
            for i, orig in enumerate(source_rows(bench_file(name))):
                f.write(json.dumps({"data_source": name, "index": i,
                                    "responses": [f"The answer is $\\boxed{{{orig['answer']}}}$.", "\\boxed{-1}"]})
                        + "\n")
    data = [str(tmp_path / "eval" / f"{n}.parquet") for n in ("aime24", "aime25")]
    assert evaluate(["score", "--generations", str(gens), "--data", *data, "--out", str(tmp_path / "run")]) == 0
    res = json.loads((tmp_path / "run" / "result.json").read_text())
    for name in ("aime24", "aime25"):
        assert res["benchmarks"][name]["avg"] == 0.5 and res["benchmarks"][name]["pass_at"]["2"] == 1.0
