"""Turn what a user points at into a Hugging Face model directory the generation back-ends can load.

Accepted: a HF model directory (``config.json`` + weights) or hub id; verl's checkpoint root (the folder with
``latest_checkpointed_iteration.txt``: its latest step is used); a ``global_step_N`` folder; its ``actor``
folder. verl saves the actor as FSDP shards (``model_world_size_W_rank_R.pt`` + ``fsdp_config.json``) with the
config and tokenizer in ``actor/huggingface``; full HF weights land there only when
``actor.checkpoint.save_contents`` includes ``hf_model``. Without them the shards are merged with verl's own
``verl.model_merger`` (FSDP backend) into ``merge_dir`` once; later calls reuse the merge.
"""

from __future__ import annotations

import json
import logging
import os
import re
from pathlib import Path

from verl_ext.checkpoint_layout import STEP_RE, TRACKER, step_folder

logger = logging.getLogger(__name__)

WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                "pytorch_model.bin.index.json")
_HUB_ID_RE = re.compile(r"^[\w.-]+/[\w.-]+$")
MERGE_MARKER = "merged_from.json"


def is_hf_model_dir(path: Path) -> bool:
    return (path / "config.json").is_file() and any((path / w).is_file() for w in WEIGHT_FILES)


def _latest_step(root: Path) -> Path:
    marker = root / TRACKER
    text = marker.read_text(encoding="utf-8").strip()
    if not text.isdigit():
        raise ValueError(f"{marker}: expected a step number, found {text!r}")
    step_dir = step_folder(root, int(text))
    if not step_dir.is_dir():
        raise FileNotFoundError(f"{marker} names step {text} but {step_dir} does not exist")
    return step_dir


def actor_dir(path: Path) -> Path | None:
    """The ``actor`` folder of a verl checkpoint at/under ``path``, or None when ``path`` is not one."""
    if (path / TRACKER).is_file():
        path = _latest_step(path)
    if STEP_RE.match(path.name) and (path / "actor").is_dir():
        return path / "actor"
    if path.name == "actor" and ((path / "fsdp_config.json").is_file() or (path / "huggingface").is_dir()):
        return path
    return None


def _shards(actor: Path) -> list[Path]:
    return sorted(actor.glob("model_world_size_*_rank_*.pt"))


def resolve_model(spec: str, merge_dir: str | os.PathLike | None = None) -> str:
    """A loadable HF model path for ``spec`` (see module docstring); merges FSDP shards when it must."""
    path = Path(spec).expanduser()
    if not path.exists():
        if _HUB_ID_RE.match(spec) and not spec.startswith((".", "~")):
            return spec  # a hub id such as Qwen/Qwen3-4B-Instruct-2507
        raise FileNotFoundError(f"model path {spec} does not exist (and is not a hub id like org/name)")
    if is_hf_model_dir(path):
        return str(path)
    actor = actor_dir(path)
    if actor is None:
        raise ValueError(f"{path} is neither a HF model directory (config.json + weights) nor a verl checkpoint "
                         "(a folder with latest_checkpointed_iteration.txt, global_step_N, or its actor/)")
    hf = actor / "huggingface"
    if is_hf_model_dir(hf):
        return str(hf)
    if not _shards(actor) or not (actor / "fsdp_config.json").is_file():
        raise ValueError(f"{actor}: no HF weights in huggingface/ and no FSDP shards to merge "
                         "(model_world_size_*_rank_*.pt + fsdp_config.json); a Megatron checkpoint must be merged "
                         "first: python -m verl.model_merger merge --backend megatron --local_dir ... --target_dir ...")
    if merge_dir is None:
        raise ValueError(f"{actor} holds FSDP shards only: give a merge directory (--merge-dir) for the HF weights")
    return merge_fsdp(actor, Path(merge_dir).expanduser())


def merge_fsdp(actor: Path, target: Path) -> str:
    """verl's FSDP merger, once per (actor folder, shard mtimes); the result is a HF model directory."""
    stamp = {"actor": str(actor.resolve()), "shards": {p.name: p.stat().st_mtime_ns for p in _shards(actor)}}
    marker = target / MERGE_MARKER
    if is_hf_model_dir(target) and marker.is_file() and json.loads(marker.read_text(encoding="utf-8")) == stamp:
        logger.info("reusing the merged model in %s", target)
        return str(target)
    from verl.model_merger.base_model_merger import ModelMergerConfig
    from verl.model_merger.fsdp_model_merger import FSDPModelMerger

    target.mkdir(parents=True, exist_ok=True)
    logger.info("merging FSDP shards of %s into %s (verl.model_merger)", actor, target)
    config = ModelMergerConfig(operation="merge", backend="fsdp", target_dir=str(target), local_dir=str(actor),
                               hf_model_config_path=str(actor / "huggingface"))
    merger = FSDPModelMerger(config)
    merger.merge_and_save()
    merger.cleanup()
    _copy_tokenizer(actor / "huggingface", target)
    if not is_hf_model_dir(target):
        raise RuntimeError(f"verl.model_merger wrote no HF weights to {target}")
    marker.write_text(json.dumps(stamp), encoding="utf-8")
    return str(target)


def _copy_tokenizer(src: Path, dst: Path) -> None:
    """The merger saves weights + config; generation also needs the tokenizer and chat template."""
    import shutil

    for item in src.iterdir():
        if item.is_file() and not (dst / item.name).exists():
            shutil.copy2(item, dst / item.name)
