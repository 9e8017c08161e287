"""The pool's checkpoint file beside verl's ``data.pt``: ``pool_state.pkl`` in the step folder.

Why a file of its own: verl saves the dataloader state with ``torch.save``, which took ~27 s (80 s on a busy
machine) for a 10^6-record pool and doubled peak memory while it ran. The pool's plain-data state written with
``pickle`` protocol 5 takes a fraction of that (docs/pool.md, ``python -m verl_ext.bench.pool_checkpoint``), and
``data.pt`` keeps only a small reference. The file is written to a temporary name and renamed, so a crash mid-save
leaves the previous file or none, never half of one; it carries a format version and the record count, checked on
load. Pickle only ever holds plain data here (lists, dicts, numbers, strings), like ``data.pt`` itself.
"""

from __future__ import annotations

import os
import pickle
from typing import Any

FILE_NAME = "pool_state.pkl"
FORMAT = "verl-heapa-pool"
FORMAT_VERSION = 1


def write_pool_file(folder: str, pool_state: dict[str, Any]) -> dict[str, Any]:
    """Write ``pool_state`` into ``folder`` atomically; return the reference that goes into ``data.pt``."""
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, FILE_NAME)
    tmp = f"{path}.tmp.{os.getpid()}"
    payload = {"format": FORMAT, "version": FORMAT_VERSION, "records": len(pool_state["records"]),
               "pool": pool_state}
    try:
        with open(tmp, "wb") as f:
            pickle.dump(payload, f, protocol=5)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):  # the write failed: leave the previous file, not a partial one
            os.remove(tmp)
    return {"file": FILE_NAME, "path": os.path.abspath(path), "records": payload["records"]}


def read_pool_file(ref: dict[str, Any], folder: str | None) -> dict[str, Any]:
    """The pool state a reference points to: ``folder/<file>`` when the folder is known (the trainer sets it to
    the checkpoint being loaded, so a moved checkpoint works), else the absolute path recorded at save time."""
    path = os.path.join(folder, ref["file"]) if folder else ref["path"]
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path}: the pool file of this checkpoint is missing (data.pt refers to it)")
    with open(path, "rb") as f:
        payload = pickle.load(f)  # noqa: S301 - our own checkpoint, plain data, as trusted as data.pt
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise ValueError(f"{path} is not a verl-heapa pool file")
    if payload.get("version") != FORMAT_VERSION:
        raise ValueError(f"{path}: pool file version {payload.get('version')!r}; this code reads {FORMAT_VERSION}")
    if payload["records"] != ref["records"] or len(payload["pool"]["records"]) != ref["records"]:
        raise ValueError(f"{path} holds {len(payload['pool']['records'])} records, data.pt expects "
                         f"{ref['records']}: the file belongs to another checkpoint")
    return payload["pool"]
