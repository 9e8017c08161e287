"""Where two x86 CPUs part ways on the pinned ``tiny`` build: a digest of each stage of it, to compare between machines.

The pinned kernels (``verl_ext/cpu/numerics.py``) make the build deterministic on one CPU, but an AMD EPYC of family
25, model 17 builds another model than the Intel Xeon did. Run this on both and diff the tables: the first stage
whose digest differs holds the kernel that differs (the tokenizer is pure Rust; the initial weights are the seeded
RNG and its transforms; one forward adds the model's matrix products, norms, rotary embedding and attention; one
backward their gradients; the warm-start steps add AdamW and the clipping of gradients).

    .venv/bin/python scripts/numerics_probe.py [--steps 1,10,100,500]   # 80 CPU-s; prints a table

It runs itself again in a pinned child when this process is not pinned, as the asset build does.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from verl_ext.cpu.assets import (BUILD_THREADS, PROFILES, build_model, set_default_spin, train_tokenizer,
                                 warm_start)
from verl_ext.cpu.numerics import cpu_name, pinned, pinned_env

WARM_STEPS = (1, 10, 100, 500)  # of the build's 2,500


def _digest(tensors) -> str:
    h = hashlib.sha256()
    for t in tensors:
        h.update(t.detach().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def stages(warm_steps: tuple[int, ...] = WARM_STEPS) -> list[tuple[str, str]]:
    import torch

    torch.set_num_threads(BUILD_THREADS)
    cfg = PROFILES["tiny"]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tokenizer = train_tokenizer(cfg, Path(tmp))
        rows.append(("tokenizer (tokenizer.json)", hashlib.sha256((Path(tmp) / "tokenizer.json").read_bytes())
                     .hexdigest()[:16]))
    model = build_model(cfg, tokenizer)
    rows.append(("initial weights", _digest(model.parameters())))
    ids = torch.tensor([tokenizer.encode("12+34=46 and 7*8=56, so \\boxed{102}")] * 2)
    out = model(input_ids=ids, labels=ids)
    rows.append(("one forward (logits)", _digest([out.logits])))
    out.loss.backward()
    rows.append(("one backward (gradients)", _digest(p.grad for p in model.parameters())))
    fresh = build_model(cfg, tokenizer)

    def probe(step: int) -> bool:  # the build's own schedule, read at a few of its steps
        if step in warm_steps:
            rows.append((f"warm start, step {step} of {cfg.warm_steps}", _digest(fresh.parameters())))
        return step >= max(warm_steps)

    warm_start(cfg, fresh, tokenizer, on_step=probe)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", default=",".join(map(str, WARM_STEPS)),
                        help="warm-start steps at which to digest the weights (comma-separated)")
    steps = tuple(sorted({int(s) for s in parser.parse_args().steps.split(",")}))
    if not steps or steps[0] < 1:
        parser.error(f"--steps must name steps from 1 up, got {steps}")
    if not pinned():
        env = pinned_env()
        set_default_spin(env)
        return subprocess.run([sys.executable, *sys.argv], env=env, check=False).returncode
    import torch

    sys.stdout.write(f"CPU: {cpu_name()}; torch {torch.__version__}; ATen {torch.backends.cpu.get_cpu_capability()}; "
                     f"MKL_CBWR={os.environ.get('MKL_CBWR')}\n\n| stage | digest |\n|---|---|\n")
    for name, digest in stages(steps):
        sys.stdout.write(f"| {name} | `{digest}` |\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
