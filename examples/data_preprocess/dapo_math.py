"""DAPO-Math-17k -> verl parquet: deduplicated by normalised problem, non-English rows dropped.

    python examples/data_preprocess/dapo_math.py --out-dir ~/data/dapo-math-17k                 # from the hub
    python examples/data_preprocess/dapo_math.py --local dapo.parquet --template dapo --out-dir DIR

The hub copy (``BytedTsinghua-SIA/DAPO-Math-17k``) holds each of its ~17k problems about 100 times, already in
verl rows with DAPO's prompt wording. Rows may also be flat (``prompt``/``problem`` string + ``solution``/
``answer``, as ``open-r1/DAPO-Math-17k-Processed``). The bare problem is recovered (DAPO's wording stripped),
rows whose problem contains CJK characters are dropped (``non_english``), and the first occurrence of each
normalised problem is kept (``duplicate``; duplicates whose answer differs are counted as
``duplicate_conflicting_answer`` and listed in the report). The problem is re-wrapped with ``--template``.

Output: ``<out-dir>/train.parquet`` (``data_source=math_dapo``, ground truth unchanged, ``extra_info.index`` =
0-based source row of the kept occurrence, ``source_index`` = the dataset's own id) and ``train.report.json``.
"""

from __future__ import annotations

import argparse
import re
import sys
import unicodedata
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as c  # noqa: E402

HUB = "BytedTsinghua-SIA/DAPO-Math-17k"
DATA_SOURCE = "math_dapo"  # the dataset's own name; verl's default scorer also knows it
# CJK ideographs (+ extension A, compatibility), kana, hangul, CJK punctuation and full-width forms.
NON_ENGLISH_RE = re.compile(r"[\u3000-\u303f\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
                            r"\uff00-\uffef]")
FLAT_PROBLEM_FIELDS = ("problem", "prompt", "question")
FLAT_ANSWER_FIELDS = ("answer", "solution")


def normalise_problem(text: str) -> str:
    """The dedup key: NFKC, case-folded, whitespace collapsed (cosmetic differences only)."""
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())


def is_non_english(text: str) -> bool:
    return NON_ENGLISH_RE.search(text) is not None


def problem_and_answer(row: Any) -> tuple[str, str, str | None, bool]:
    """(bare problem, exact answer, the dataset's own id, whether DAPO's wording was found)."""
    row = c.check_row(row)
    prompt = row.get("prompt")
    if isinstance(prompt, (list, tuple)) or type(prompt).__name__ == "ndarray":  # verl rows
        users = [m for m in list(prompt) if isinstance(m, dict) and m.get("role") == "user"]
        if not users or not isinstance(users[-1].get("content"), str) or not users[-1]["content"].strip():
            raise c.BadRow("field 'prompt' has no non-empty user message")
        problem, found = c.strip_dapo_template(users[-1]["content"])
        rm = row.get("reward_model")
        if not isinstance(rm, dict) or rm.get("ground_truth") is None:
            raise c.BadRow("field 'reward_model.ground_truth' missing")
        answer, _ = c.answer_string(rm["ground_truth"], "reward_model.ground_truth")
        info = row.get("extra_info") if isinstance(row.get("extra_info"), dict) else {}
        own_id = info.get("index")
    else:  # flat rows
        _, text = c.text_field(row, FLAT_PROBLEM_FIELDS, "problem")
        problem, found = c.strip_dapo_template(text)
        name, value = c.first_field(row, FLAT_ANSWER_FIELDS)
        if name is None:
            raise c.BadRow(f"no answer field (looked for {', '.join(FLAT_ANSWER_FIELDS)})")
        answer, _ = c.answer_string(value, name)
        own_id = (row.get("extra_info") or {}).get("index") if isinstance(row.get("extra_info"), dict) else None
    if not problem.strip():
        raise c.BadRow("the problem is empty once DAPO's wording is removed")
    return problem.strip(), answer, None if own_id is None else str(own_id), found


def convert(source: c.Source, template: str, limit: int | None = None) -> tuple[list[dict], c.Report]:
    report = c.Report(source=source.label)
    rows: list[dict] = []
    first_answer: dict[str, tuple[int, str]] = {}
    for i, row in c.iter_source(source):
        if limit is not None and report.rows_read >= limit:
            break
        report.rows_read += 1
        if report.rows_read % 200_000 == 0:
            c.logger.info("%s: %d rows read, %d kept", source.label, report.rows_read, len(rows))
        try:
            problem, answer, own_id, found = problem_and_answer(row)
        except c.BadRow as err:
            report.bad(i, str(err))
            continue
        if not found:  # counted, not dropped: the whole message is taken as the problem
            report.notes["template_not_found"] = report.notes.get("template_not_found", 0) + 1
        if is_non_english(problem):
            report.drop("non_english")
            continue
        key = normalise_problem(problem)
        if key in first_answer:
            kept_row, kept_answer = first_answer[key]
            if kept_answer != answer:
                report.drop("duplicate_conflicting_answer")
                report.notes.setdefault("conflicts", []).append({"file": source.label, "row": i, "kept_row": kept_row,
                                                                 "answer": answer, "kept_answer": kept_answer})
            else:
                report.drop("duplicate")
            continue
        first_answer[key] = (i, answer)
        rows.append(c.verl_row(data_source=DATA_SOURCE, content=c.apply_template(problem, template), answer=answer,
                               ability="math", extra_info={"index": i, "split": "train", "source_index": own_id,
                                                           "problem": problem}))
    kept_conflicts = report.notes.get("conflicts", [])
    if len(kept_conflicts) > c.MAX_LISTED_BAD_ROWS:
        report.notes["conflicts"] = kept_conflicts[: c.MAX_LISTED_BAD_ROWS]
    report.notes.update(template=template, data_source=DATA_SOURCE)
    return rows, report


def main(argv: list[str] | None = None) -> int:
    c.setup_logging()
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out-dir", default="~/data/dapo-math-17k", help="where train.parquet and its report go")
    p.add_argument("--local", default=None, help="a local json/jsonl/parquet file instead of the hub")
    p.add_argument("--hub", default=HUB, help="hub dataset name")
    p.add_argument("--hub-config", default=None, help="hub dataset config (e.g. 'en' for the open-r1 copy)")
    p.add_argument("--split", default="train")
    p.add_argument("--template", choices=c.TEMPLATES, default="boxed",
                   help="boxed (matches reward format boxed/auto) or dapo (reward format dapo/auto)")
    p.add_argument("--limit", type=int, default=None, help="read at most this many source rows")
    p.add_argument("--strict", action="store_true", help="fail (exit 2, nothing written) on any bad row")
    args = p.parse_args(argv)
    source = (c.Source(local=str(Path(args.local).expanduser())) if args.local
              else c.Source(hub=args.hub, config=args.hub_config, split=args.split))
    rows, report = convert(source, args.template, args.limit)
    out = Path(args.out_dir).expanduser() / "train.parquet"
    if args.strict and report.bad_count:
        return c.finish(report, True, out)
    c.write_rows(rows, out, report)
    sys.stdout.write(f"{out}\n")
    return c.finish(report, False, out)


if __name__ == "__main__":
    sys.exit(main())
