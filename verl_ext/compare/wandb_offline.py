"""Reading a wandb offline run (``wandb/offline-run-*/run-*.wandb``) without syncing it.

The file is wandb's transaction log: a 7-byte header (``:W&B``, magic, version) then LevelDB-log framing
(32 KiB blocks; each chunk has a 7-byte header: CRC32C, length, type FULL/FIRST/MIDDLE/LAST). Each record is a
``wandb.proto.wandb_internal_pb2.Record`` protobuf; we read its ``run`` (name, tags, config) and ``history``
(one row of logged scalars with ``_step``) records. wandb's Python SDK no longer ships a reader for the framing
(its Go core does the syncing), so the framing is read here and the records are decoded with the SDK's own
protobuf classes. Checksums are not verified; a torn tail (a killed run) ends the read with a warning.
"""

from __future__ import annotations

import json
import logging
import re
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

HEADER = b":W&B"
HEADER_LEN = 7
BLOCK = 32768
CHUNK_HEADER = 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def find_run_files(folder: Path) -> list[Path]:
    """``run-*.wandb`` files in ``folder`` itself, its ``offline-run-*`` children, or ``folder/wandb``."""
    hits = sorted(folder.glob("run-*.wandb"))
    if hits:
        return hits
    for base in (folder, folder / "wandb"):
        runs = sorted(base.glob("offline-run-*/run-*.wandb")) + sorted(base.glob("run-*/run-*.wandb"))
        if runs:
            return runs
    return []


def iter_records(path: Path) -> Iterator[bytes]:
    """The raw record payloads of a ``.wandb`` file, in order."""
    data = path.read_bytes()
    if len(data) < HEADER_LEN or not data.startswith(HEADER):
        raise ValueError(f"{path}: not a wandb run file (header {data[:HEADER_LEN]!r})")
    pos, pending = HEADER_LEN, b""
    while pos + CHUNK_HEADER <= len(data):
        left_in_block = BLOCK - (pos % BLOCK)
        if left_in_block < CHUNK_HEADER:  # trailer padding at the end of a block
            pos += left_in_block
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos:pos + CHUNK_HEADER])
        if kind == 0 and length == 0:  # zero padding: the writer stopped here
            break
        start, end = pos + CHUNK_HEADER, pos + CHUNK_HEADER + length
        if end > len(data) or kind not in (FULL, FIRST, MIDDLE, LAST):
            logger.warning("%s: torn or unknown chunk at byte %d; stopping there", path, pos)
            break
        chunk, pos = data[start:end], end
        if kind == FULL:
            yield chunk
        elif kind == FIRST:
            pending = chunk
        elif kind == MIDDLE:
            pending += chunk
        else:
            yield pending + chunk
            pending = b""


def _value(value_json: str) -> Any:
    try:
        return json.loads(value_json)
    except json.JSONDecodeError:
        return None


def _key(item: Any) -> str:
    return item.key or ".".join(item.nested_key)


def read_records(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(run info {name, id, project, tags, config, start_us}, history rows) of one offline run file."""
    from wandb.proto import wandb_internal_pb2 as pb

    info: dict[str, Any] = {"name": None, "id": None, "project": None, "tags": [], "config": {}, "start_us": None}
    rows: list[dict[str, Any]] = []
    for raw in iter_records(path):
        record = pb.Record()
        record.ParseFromString(raw)
        kind = record.WhichOneof("record_type")
        if kind == "run":
            info.update(name=record.run.display_name or None, id=record.run.run_id or None,
                        project=record.run.project or None, tags=list(record.run.tags),
                        start_us=record.run.start_time.ToMicroseconds() if record.run.HasField("start_time")
                        else None)
            info["config"].update({_key(i): _value(i.value_json) for i in record.run.config.update})
        elif kind == "config":
            info["config"].update({_key(i): _value(i.value_json) for i in record.config.update})
        elif kind == "history":
            row = {_key(i): _value(i.value_json) for i in record.history.item}
            if "_step" not in row and record.history.HasField("step"):
                row["_step"] = record.history.step.num
            rows.append(row)
    return info, rows
