"""Run folders built from a real CPU launcher log (``fixtures/heapa_dapo_probe.jsonl``).

The fixture is a trimmed copy of the ``metrics.jsonl`` that ``scripts/run_heapa_dapo_qwen.sh`` wrote in a 4-step
CPU run (FORCE_CPU=1 STEPS=4, trainer.test_freq=2): validation at steps 0, 2, 4; DAPO filtering, pool, select and
feedback metrics every step. ``make_run`` writes variants of it (shifted accuracies, GRPO-shaped logs) the way the
launcher lays them out: ``<root>/<name>/metrics.jsonl``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

FIXTURE = Path(__file__).parent / "fixtures" / "heapa_dapo_probe.jsonl"
DAPO_ONLY = ("feedback/evicted_groups_fed_back", "training/filter_groups/evicted_samples",
             "training/filter_groups/discarded_surplus_samples")


def probe_lines() -> list[dict]:
    return [json.loads(line) for line in FIXTURE.read_text(encoding="utf-8").splitlines() if line.strip()]


def make_run(root: Path, name: str, val_shift: float = 0.0, grpo: bool = False, drop_steps: tuple = (),
             extra: dict | None = None) -> Path:
    folder = root / name
    folder.mkdir(parents=True, exist_ok=True)
    lines = []
    for obj in probe_lines():
        if obj["step"] in drop_steps:
            continue
        data = dict(obj["data"])
        for key in list(data):
            if key.startswith("val-core/"):
                data[key] = data[key] + val_shift * obj["step"]
            if grpo and key in DAPO_ONLY:
                del data[key]
        data.update((extra or {}).get(obj["step"], {}))
        lines.append(json.dumps({"step": obj["step"], "data": data}))
    (folder / "metrics.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder


@pytest.fixture
def make_run_dir(tmp_path):
    """``make_run_dir(name, **variant)`` -> the folder ``tmp_path/<name>`` holding a variant of the probe log."""
    return lambda name, **kwargs: make_run(tmp_path, name, **kwargs)


@pytest.fixture
def probe_file() -> Path:
    return FIXTURE
