"""The process sandbox bounds a stalling comparison from a non-main thread and recovers."""

from __future__ import annotations

import threading
import time

from verl_ext.reward.math_score import compute_score
from verl_ext.reward.sandbox import MathVerifySandbox


def test_sandbox_kills_a_stall_and_keeps_working() -> None:
    sandbox = MathVerifySandbox(workers=1, timeout_s=0.75)
    results: dict[str, object] = {}

    def run() -> None:
        results["equal"] = sandbox(r"\frac12", "0.5")
        start = time.perf_counter()
        results["stall"] = sandbox(r"9^{9^{9}}", "7")  # the guard is bypassed: call the sandbox directly
        results["stall_s"] = time.perf_counter() - start
        results["after"] = compute_score("x", r"\boxed{\sqrt{4}}", "2", sandbox=sandbox)["acc"]

    try:
        t = threading.Thread(target=run)
        t.start()
        t.join(120)
        assert not t.is_alive()
        assert results["equal"] is True
        assert results["stall"] is False and results["stall_s"] < 1.9
        assert results["after"] == 1.0
        assert sandbox.counts["timeout"] == 1
        assert sandbox.metrics()["reward/sandbox_timeout"] == 1.0
    finally:
        sandbox.close()
