"""Offline tiny assets: a Qwen2-architecture model, a locally trained tokenizer and the arithmetic task.

``python -m verl_ext.cpu.assets --out DIR`` writes::

    DIR/model/            config.json, model.safetensors, tokenizer.json, chat template (HF format)
    DIR/data/train.parquet, DIR/data/val.parquet   (verl's RL row format, data_source "arith")
    DIR/manifest.json     build settings, parameter count, warm-start accuracy per level

Nothing is downloaded: the tokenizer is trained on the task's own text and the model gets a short supervised
warm start (answers and augmentation rewrites) so its pass rates sit between 0 and 1 — a random model earns
reward 0 everywhere and GRPO would learn nothing. The build is deterministic on one CPU and computes with the
kernels ``numerics.py`` pins, in a child process when the caller's are not, so that CPUs agree (they do not on
every x86 CPU: docs/cpu_backend.md). It is cached: a second call with the same settings returns at once.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import random
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from verl_ext.augment import protocol
from verl_ext.cpu.numerics import pinned, pinned_env
from verl_ext.tasks import arithmetic

logger = logging.getLogger(__name__)

ASSET_VERSION = 4  # 4: built with the pinned kernels (numerics.py); 3 was the build of whichever CPU ran it
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# The CPU preset renders augmentation requests without few-shot turns (short prompts keep CPU steps fast).
CPU_AUGMENT_PROMPT = protocol.AugmentPrompt(
    instruction="Write a similar problem with new numbers and rate its difficulty.",
    answer_format=f"Reply: {protocol.TAG_NEW} problem {protocol.TAG_DIFFICULTY} factor {protocol.TAG_END}",
    shots=(),
)


@dataclass(frozen=True)
class AssetConfig:
    """Build settings; their hash names the cache entry."""

    seed: int = 0
    vocab_size: int = 512
    hidden_size: int = 64
    layers: int = 2
    heads: int = 4
    kv_heads: int = 2
    intermediate_size: int = 192
    max_positions: int = 512
    train_rows: int = 2000
    val_rows: int = 200
    warm_steps: int = 2500
    warm_batch: int = 32
    warm_lr: float = 5e-3
    augment_share: float = 0.2
    # Share of warm-start answers written in the verifier's format (\boxed{N}); the rest are a bare "N", which
    # the reward does not read. Below 1 the model knows more arithmetic than it is paid for: the headroom RL
    # finds first, as RLVR on real models first learns the answer format (the ``learn`` profile).
    boxed_share: float = 1.0

    def digest(self) -> str:
        blob = json.dumps({"v": ASSET_VERSION, **asdict(self)}, sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]


# Named builds. ``tiny``: the tests' and quickstart's default (the warm start answers in the verifier's format).
# ``learn``: the same model size and task with half the warm-start answers unboxed and a 512-problem validation
# set, so a short CPU run shows GRPO raising validation accuracy (docs/cpu_learning.md). ``gpu``: see below.
PROFILES: dict[str, AssetConfig] = {
    "tiny": AssetConfig(),
    "learn": AssetConfig(val_rows=512, boxed_share=0.5),
    # scripts/gpu_smoke.sh: attention heads of 64 dimensions (vLLM's GPU attention kernels take 64, not the tiny
    # model's 16) and a shorter warm start; the same task and tokenizer
    "gpu": AssetConfig(hidden_size=128, heads=2, kv_heads=1, intermediate_size=384, warm_steps=800),
}


def _corpus(cfg: AssetConfig) -> list[str]:
    rng = random.Random(cfg.seed)
    lines = [protocol.build_messages(arithmetic.make_problem(rng, lvl)[0], CPU_AUGMENT_PROMPT)[-1]["content"]
             for lvl in arithmetic.LEVELS for _ in range(3)]
    lines += [protocol.format_answer("What is 1 + 2?", 1.0), arithmetic.format_response(123)] * 20
    lines += ["<|im_start|>user\n", "<|im_start|>assistant\n"] * 50
    lines += [arithmetic.make_problem(rng, lvl)[0] for lvl in arithmetic.LEVELS for _ in range(50)]
    return lines


def train_tokenizer(cfg: AssetConfig, out_dir: Path):
    """A byte-level BPE with single-digit tokens (arithmetic is learnable digit by digit) and ChatML."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=cfg.vocab_size, special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False,
    )
    tok.train_from_iterator(_corpus(cfg), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>", bos_token=None,
        additional_special_tokens=["<|im_start|>"],
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out_dir)
    return fast


def build_model(cfg: AssetConfig, tokenizer):
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(cfg.seed)
    config = Qwen2Config(
        vocab_size=len(tokenizer), hidden_size=cfg.hidden_size, intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.layers, num_attention_heads=cfg.heads, num_key_value_heads=cfg.kv_heads,
        max_position_embeddings=cfg.max_positions, tie_word_embeddings=True,
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, bos_token_id=None,
        torch_dtype="float32",
    )
    model = Qwen2ForCausalLM(config)
    model.generation_config = GenerationConfig(
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, do_sample=False
    )
    return model


def _render(tokenizer, messages: list[dict], answer: str) -> tuple[list[int], int]:
    prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    p_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    a_ids = tokenizer(answer + "<|im_end|>", add_special_tokens=False)["input_ids"]
    return p_ids + a_ids, len(p_ids)


def _augment_example(rng: random.Random) -> tuple[list[dict], str]:
    level_idx = rng.randrange(len(arithmetic.LEVELS))
    parent, _ = arithmetic.make_problem(rng, arithmetic.LEVELS[level_idx])
    child_level = arithmetic.LEVELS[max(0, min(len(arithmetic.LEVELS) - 1, level_idx + rng.choice((-1, 0, 0, 1))))]
    child, _ = arithmetic.make_problem(rng, child_level)
    ratio = arithmetic.difficulty(arithmetic.parse_problem(child)) / max(
        1e-6, arithmetic.difficulty(arithmetic.parse_problem(parent)))
    diff = min(protocol.DIFFICULTY_MAX, max(protocol.DIFFICULTY_MIN, ratio))
    return protocol.build_messages(parent, CPU_AUGMENT_PROMPT), protocol.format_answer(child, diff)


def _answer_example(rng: random.Random, boxed_share: float) -> tuple[list[dict], str]:
    """A problem and its warm-start answer: boxed with probability ``boxed_share``, else the bare number."""
    text, ans = arithmetic.make_problem(rng, rng.choice(arithmetic.LEVELS))
    unboxed = boxed_share < 1.0 and rng.random() >= boxed_share  # no extra draw at 1.0: the tiny model is unchanged
    return [{"role": "user", "content": text}], str(ans) if unboxed else arithmetic.format_response(ans)


def warm_start(cfg: AssetConfig, model, tokenizer, on_step: Callable[[int], bool] | None = None) -> dict:
    """Short supervised fit on answers (loss on the answer only) plus augmentation rewrites. ``on_step(n)`` is
    called after the n-th optimizer step; a true return ends the fit there (``scripts/numerics_probe.py`` reads
    the build's own schedule that way)."""
    import torch

    torch.manual_seed(cfg.seed)
    rng = random.Random(cfg.seed + 1)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.warm_lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=cfg.warm_lr, total_steps=cfg.warm_steps, pct_start=0.1)
    model.train()
    losses = []
    for step in range(cfg.warm_steps):
        seqs = []
        for _ in range(cfg.warm_batch):
            if rng.random() < cfg.augment_share:
                messages, answer = _augment_example(rng)
            else:
                messages, answer = _answer_example(rng, cfg.boxed_share)
            seqs.append(_render(tokenizer, messages, answer))
        width = max(len(s) for s, _ in seqs)
        ids = torch.full((len(seqs), width), tokenizer.pad_token_id, dtype=torch.long)
        labels = torch.full_like(ids, -100)
        mask = torch.zeros_like(ids)
        for i, (s, p_len) in enumerate(seqs):
            ids[i, : len(s)] = torch.tensor(s)
            labels[i, p_len: len(s)] = torch.tensor(s[p_len:])
            mask[i, : len(s)] = 1
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(loss.item())
        if step % 100 == 0:
            logger.info("warm start step %d/%d loss %.3f", step, cfg.warm_steps, losses[-1])
        if on_step is not None and on_step(step + 1):
            break
    model.eval()
    return {"first_loss": losses[0], "last_loss": sum(losses[-20:]) / min(20, len(losses))}


def greedy_accuracy(model, tokenizer, rows: list[dict], max_new_tokens: int = 12) -> dict:
    """Greedy pass rate per level and overall, scored by exact match of the boxed answer."""
    import torch

    per_level: dict[str, list[int]] = {}
    for row in rows:
        prompt = tokenizer.apply_chat_template(row["prompt"], add_generation_prompt=True, tokenize=False)
        ids = torch.tensor([tokenizer(prompt, add_special_tokens=False)["input_ids"]])
        with torch.no_grad():
            out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens,
                                 do_sample=False, eos_token_id=tokenizer.eos_token_id,
                                 pad_token_id=tokenizer.pad_token_id)
        text = tokenizer.decode(out[0, ids.shape[1]:], skip_special_tokens=True)
        ok = arithmetic.answer_from_response(text) == row["reward_model"]["ground_truth"]
        per_level.setdefault(row["extra_info"]["level"], []).append(int(ok))
    flat = [x for v in per_level.values() for x in v]
    return {"overall": sum(flat) / len(flat), **{k: sum(v) / len(v) for k, v in per_level.items()}}


def _write_parquet(rows: list[dict], path: Path) -> None:
    import pandas as pd

    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_parquet(path, index=False)


def build_assets(out: str | os.PathLike, cfg: AssetConfig | None = None, force: bool = False) -> Path:
    """Build (or reuse) the assets under ``out``; returns the directory.

    A file lock next to ``out`` makes concurrent callers (parallel test sessions, a launcher) wait for one build.
    """
    import fcntl

    out = Path(out).expanduser().resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.parent / f".{out.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, also if this process dies
        return _build_locked(out, cfg or AssetConfig(), force)


def _build_locked(out: Path, cfg: AssetConfig, force: bool) -> Path:
    manifest_path = out / "manifest.json"
    if not force and manifest_path.exists():
        manifest = json.loads(manifest_path.read_text())
        if manifest.get("digest") == cfg.digest():
            return out
        held = next((name for name, p in PROFILES.items() if p.digest() == manifest.get("digest")), None)
        if held is not None:  # a current build of another profile: replacing it would break whoever uses it
            raise AssetProfileMismatch(
                f"{out} holds the '{held}' asset build, not the one asked for (digest {cfg.digest()}): choose "
                f"another --out / VERL_EXT_ASSETS, ask for '{held}' (ASSETS_PROFILE={held}), or pass --force"
            )
    if pinned():  # this process's OpenMP settings are its caller's
        return _build(out, cfg)
    # this process's torch may already compute with its CPU's own kernels: build in a child started pinned, so that
    # CPUs agree on the model (numerics.py)
    env = pinned_env()
    set_default_spin(env)
    subprocess.run([sys.executable, "-c", _BUILD_IN_CHILD, str(out), json.dumps(asdict(cfg))], env=env, check=True)
    return out


# libgomp's threads spin ~300,000 times at every barrier before they sleep: while another process holds a core (the
# test suite's other worker, a second run), each of the build's two threads waits out that process's time slice at
# every barrier. 300 warm-start steps of the tiny profile beside one busy core: 285 s with libgomp's default, 45 s
# with 1,000 spins (42 s never spinning); on an idle machine 25.0 s, 29.0 s and 31.3 s. Same weights in all (hash).
BUILD_SPIN = {"GOMP_SPINCOUNT": "1000"}


def set_default_spin(env) -> None:
    """The build's spin count unless the caller chose how OpenMP waits."""
    if "GOMP_SPINCOUNT" not in env and "OMP_WAIT_POLICY" not in env:
        env.update(BUILD_SPIN)


_BUILD_IN_CHILD = ("import json, logging, sys; from pathlib import Path; "
                   "from verl_ext.cpu.assets import AssetConfig, _build; "
                   "logging.basicConfig(level=logging.INFO, format='%(asctime)s %(levelname)s %(message)s'); "
                   "_build(Path(sys.argv[1]), AssetConfig(**json.loads(sys.argv[2])))")
# Reductions split their work by thread: the same count on every machine, whatever its cores.
BUILD_THREADS = 2


def _build(out: Path, cfg: AssetConfig) -> Path:
    """Build into ``out`` in this process (its kernels pinned by the caller)."""
    import torch

    start = time.time()
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    (tmp / "model").mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(BUILD_THREADS)
    tokenizer = train_tokenizer(cfg, tmp / "model")
    model = build_model(cfg, tokenizer)
    fit = warm_start(cfg, model, tokenizer)
    model.save_pretrained(tmp / "model")
    train_rows = arithmetic.make_rows(cfg.train_rows, cfg.seed, "train")
    val_rows = arithmetic.make_rows(cfg.val_rows, cfg.seed, "val", start_index=cfg.train_rows)
    _write_parquet(train_rows, tmp / "data" / "train.parquet")
    _write_parquet(val_rows, tmp / "data" / "val.parquet")
    acc = greedy_accuracy(model, tokenizer, val_rows)
    manifest = {
        "digest": cfg.digest(), "config": asdict(cfg), "params": sum(p.numel() for p in model.parameters()),
        "vocab": len(tokenizer), "warm_start": fit, "greedy_val_accuracy": acc,
        "build_seconds": round(time.time() - start, 1),
    }
    (tmp / "manifest.json").write_text(json.dumps(manifest, indent=2))
    if out.exists():
        import shutil

        shutil.rmtree(out)
    tmp.rename(out)
    logger.info("tiny assets written to %s in %.0fs (greedy val accuracy %.2f)", out, time.time() - start,
                acc["overall"])
    return out


class AssetProfileMismatch(RuntimeError):
    """The output folder holds a current build of a different profile (it is left alone)."""


def default_assets_dir() -> Path:
    return Path(os.environ.get("VERL_EXT_ASSETS", Path.home() / ".cache" / "verl_ext" / "tiny"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=str(default_assets_dir()), help="output directory (cached)")
    parser.add_argument("--force", action="store_true", help="rebuild even if a matching build exists")
    parser.add_argument("--profile", choices=sorted(PROFILES), default="tiny",
                        help="named build settings (tiny: tests and quickstart; learn: the CPU learning run)")
    parser.add_argument("--warm-steps", type=int, default=None, help="override the profile's warm-start steps")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", force=True)
    cfg = PROFILES[args.profile]
    if args.warm_steps is not None:
        cfg = replace(cfg, warm_steps=args.warm_steps)
    try:
        out = build_assets(args.out, cfg, force=args.force)
    except AssetProfileMismatch as err:
        sys.stderr.write(f"verl_ext.cpu.assets: {err}\n")
        return 2
    manifest = json.loads((out / "manifest.json").read_text())
    sys.stdout.write(json.dumps({"dir": str(out), "params": manifest["params"],
                                 "greedy_val_accuracy": manifest["greedy_val_accuracy"]["overall"],
                                 "build_seconds": manifest["build_seconds"]}) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
