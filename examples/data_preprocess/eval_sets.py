"""Evaluation sets -> verl parquet: AIME24, AIME25, AMC23, MATH500, Minerva Math, OlympiadBench, GPQA-Diamond.

    python examples/data_preprocess/eval_sets.py all --out-dir ~/data/eval            # every set from the hub
    python examples/data_preprocess/eval_sets.py math500 --local math500.jsonl --out-dir ~/data/eval
    python examples/data_preprocess/eval_sets.py aime24 aime25 --template dapo --out-dir ~/data/eval_dapo

Writes ``<out-dir>/<name>.parquet`` (verl's RL rows, ``data_source=<name>``) and ``<name>.report.json``
(rows read/written, bad rows with file/row/reason). Ground truths are the source's answer strings unchanged;
``extra_info`` keeps ``index`` (0-based source row), ``split``, ``source``, ``source_id``, ``problem``, and for
GPQA the shuffled choices and the letter mapping (see ``gpqa.py``).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as c  # noqa: E402
import gpqa  # noqa: E402

PROBLEM_FIELDS = ("problem", "question", "Problem", "Question")
ANSWER_FIELDS = ("answer", "final_answer", "Answer")
ID_FIELDS = ("id", "unique_id", "ID", "problem_idx", "Record ID")


@dataclass(frozen=True)
class Benchmark:
    """Where a benchmark lives on the hub and how its rows are read."""

    name: str                      # also the data_source (val metrics: val-core/<name>/acc/mean@N)
    hub: str
    split: str
    config: str | None = None
    ability: str = "math"
    expected_rows: int | None = None  # the published size, checked only when reading the hub copy
    extra_fields: tuple[str, ...] = ()  # copied into extra_info when present
    context_field: str | None = None    # prepended to the problem when non-empty (OlympiadBench)


BENCHMARKS = {b.name: b for b in (
    Benchmark("aime24", "HuggingFaceH4/aime_2024", "train", expected_rows=30, extra_fields=("url", "year")),
    Benchmark("aime25", "math-ai/aime25", "test", expected_rows=30),
    Benchmark("amc23", "math-ai/amc23", "test", expected_rows=40, extra_fields=("url",)),
    Benchmark("math500", "HuggingFaceH4/MATH-500", "test", expected_rows=500, extra_fields=("subject", "level")),
    Benchmark("minerva_math", "math-ai/minervamath", "test", expected_rows=272),
    Benchmark("olympiadbench", "Hothan/OlympiadBench", "train", config="OE_TO_maths_en_COMP", expected_rows=675,
              extra_fields=("subfield", "answer_type", "unit", "is_multiple_answer"), context_field="context"),
    Benchmark("gpqa_diamond", "Idavidrein/gpqa", "train", config="gpqa_diamond", ability="science",
              expected_rows=198),  # gated on the hub: accept its terms and `huggingface-cli login` first
)}


def source_id(row: dict) -> str | None:
    name, value = c.first_field(row, ID_FIELDS)
    return None if name is None else str(value)


def extras(row: dict, bench: Benchmark) -> dict[str, Any]:
    """Scalar metadata worth keeping (as strings, so parquet columns have one type)."""
    out = {}
    for key in bench.extra_fields:
        value = row.get(key)
        if value is not None and not isinstance(value, (list, dict)):
            out[key.lower().replace(" ", "_").replace("-", "_")] = str(value)
    return out


def convert_math_row(row: dict, i: int, bench: Benchmark, template: str, label: str) -> dict:
    """One math benchmark row; ``BadRow`` names the reason when it cannot be used."""
    row = c.check_row(row)
    _, problem = c.text_field(row, PROBLEM_FIELDS, "problem")
    if bench.context_field and isinstance(row.get(bench.context_field), str) and row[bench.context_field].strip():
        problem = f"{row[bench.context_field].strip()}\n\n{problem}"
    answer_name, answer_value = c.first_field(row, ANSWER_FIELDS)
    if answer_name is None:
        raise c.BadRow(f"no answer field (looked for {', '.join(ANSWER_FIELDS)})")
    answer, answers = c.answer_string(answer_value, answer_name)
    extra = {"index": i, "split": "test", "source": label, "source_id": source_id(row), "problem": problem,
             **extras(row, bench)}
    if answers is not None:
        extra["answers"] = answers
    return c.verl_row(data_source=bench.name, content=c.apply_template(problem, template), answer=answer,
                      ability=bench.ability, extra_info=extra)


def convert(bench: Benchmark, source: c.Source, template: str, seed: int) -> tuple[list[dict], c.Report]:
    report = c.Report(source=source.label)
    rows = []
    for i, row in c.iter_source(source):
        report.rows_read += 1
        try:
            if bench.name == "gpqa_diamond":
                out = gpqa.convert_row(row, i, data_source=bench.name, split="test", source=source.label,
                                       template=template, seed=seed)
            else:
                out = convert_math_row(row, i, bench, template, source.label)
        except c.BadRow as err:
            report.bad(i, str(err))
            continue
        rows.append(out)
    if source.hub == bench.hub and bench.expected_rows is not None and report.rows_read != bench.expected_rows:
        c.logger.warning("%s: read %d rows, the published set has %d", source.label, report.rows_read,
                         bench.expected_rows)
    report.notes.update(benchmark=bench.name, template=template)
    if bench.name == "gpqa_diamond":
        report.notes["choice_shuffle_seed"] = seed
    return rows, report


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("names", nargs="+", help=f"benchmarks: {', '.join(BENCHMARKS)} or 'all'")
    p.add_argument("--out-dir", default="~/data/eval", help="where <name>.parquet and <name>.report.json go")
    p.add_argument("--local", action="append", default=[], metavar="[NAME=]PATH",
                   help="read a local json/jsonl/parquet file instead of the hub (NAME= needed with several names)")
    p.add_argument("--hub", action="append", default=[], metavar="NAME=REPO[:CONFIG]:SPLIT",
                   help="read NAME from another hub dataset, e.g. aime25=yentinglin/aime_2025:train")
    p.add_argument("--template", choices=c.TEMPLATES, default="boxed",
                   help="prompt wording: boxed (verl's \\boxed{} suffix), dapo (DAPO's 'Answer:' line) or raw")
    p.add_argument("--seed", type=int, default=0, help="GPQA choice-shuffle seed (recorded in each row)")
    p.add_argument("--strict", action="store_true", help="fail (exit 2, nothing written) on any bad row")
    return p.parse_args(argv)


def local_files(args: argparse.Namespace, names: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in args.local:
        name, sep, path = item.partition("=")
        if not sep:
            if len(names) != 1:
                raise SystemExit(f"--local {item}: name the benchmark (NAME=PATH) when converting several")
            name, path = names[0], item
        if name not in names:
            raise SystemExit(f"--local {item}: {name!r} is not among the requested benchmarks {names}")
        out[name] = str(Path(path).expanduser())
    return out


def hub_sources(args: argparse.Namespace, names: list[str]) -> dict[str, c.Source]:
    """The hub source of each benchmark: its default, or ``--hub NAME=REPO[:CONFIG]:SPLIT``."""
    out = {n: c.Source(hub=BENCHMARKS[n].hub, config=BENCHMARKS[n].config, split=BENCHMARKS[n].split) for n in names}
    for item in args.hub:
        name, _, spec = item.partition("=")
        parts = spec.split(":")
        if name not in names or len(parts) not in (2, 3) or not all(parts):
            raise SystemExit(f"--hub {item}: expected NAME=REPO[:CONFIG]:SPLIT with NAME among {names}")
        out[name] = c.Source(hub=parts[0], config=parts[1] if len(parts) == 3 else None, split=parts[-1])
    return out


def main(argv: list[str] | None = None) -> int:
    c.setup_logging()
    args = parse_args(argv)
    names = list(BENCHMARKS) if args.names == ["all"] else args.names
    unknown = [n for n in names if n not in BENCHMARKS]
    if unknown:
        raise SystemExit(f"unknown benchmark(s) {unknown}; known: {', '.join(BENCHMARKS)} or 'all'")
    local = local_files(args, names)
    hub = hub_sources(args, names)
    out_dir = Path(args.out_dir).expanduser()
    status = 0
    for name in names:
        bench = BENCHMARKS[name]
        source = c.Source(local=local[name]) if name in local else hub[name]
        rows, report = convert(bench, source, args.template, args.seed)
        out = out_dir / f"{name}.parquet"
        if args.strict and report.bad_count:
            status = max(status, c.finish(report, True, out))
            continue
        c.write_rows(rows, out, report)
        status = max(status, c.finish(report, False, out))
        sys.stdout.write(f"{out}\n")
    return status


if __name__ == "__main__":
    sys.exit(main())
