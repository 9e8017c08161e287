"""scripts/ar3po_allocation_model.py: the beta fit recovers a known mix, and the rules rank as the runs measured."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "ar3po_allocation_model.py"


@pytest.fixture(scope="module")
def model():
    spec = importlib.util.spec_from_file_location("ar3po_allocation_model", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_fit_recovers_a_known_beta(model):
    pmf = model.betabinom_pmf(8, 0.5, 1.5)
    assert pmf.sum() == pytest.approx(1.0)
    bands = tuple(float(sum(pmf[k] for k in ks)) for ks in model.BAND_COUNTS)
    a, b = model.fit_beta(bands)
    assert a == pytest.approx(0.5, rel=0.1) and b == pytest.approx(1.5, rel=0.1)


def test_on_the_cpu_mix_mixed_keeps_more_signal_than_the_papers_rule(model):
    rng = np.random.default_rng(0)
    p = rng.beta(*model.fit_beta(model.CPU_BANDS), 5000)
    grpo = model.simulate(p, rng, 8, 0, 8, None)
    unsolved = model.simulate(p, rng, 2, 2, 8, "unsolved")
    mixed = model.simulate(p, rng, 4, 4, 8, "mixed")
    assert grpo[0] == 8.0 and 0.40 < grpo[1] < 0.52          # measured 0.47
    assert 5.4 < unsolved[0] < 6.2 and unsolved[1] < 0.30   # measured 5.70 / 0.26
    assert 5.0 < mixed[0] < 5.7 and mixed[1] > grpo[1]      # measured 5.44 / 0.52
