"""An in-memory stand-in for TransferQueue holding rows shaped like the ones ``AgentLoopWorkerTQ`` writes (dumped
from a real CPU run): nested tensors for the token fields, plain values for the dataset/extra fields. It stores
rows per key and answers ``kv_batch_get`` / ``kv_batch_put`` / ``kv_clear`` the way the trainer's stages use them.
"""

from __future__ import annotations

import pytest
import torch
from transfer_queue import KVBatchMeta


class FakeBatch:
    """What ``tq.kv_batch_get`` returns, as far as the stages read it: ``data[field][i]`` and ``data[i][field]``."""

    def __init__(self, rows):
        self.rows = rows

    def __getitem__(self, item):
        if isinstance(item, int):
            return self.rows[item]
        return [row[item] for row in self.rows]


class FakeTQ:
    PROMPT = [1, 305, 201, 263, 262, 223, 18, 264, 223, 20, 265, 223, 25, 33, 2, 201, 1, 312, 201]

    def __init__(self):
        self.rows: dict[str, dict] = {}
        self.tags: dict[str, dict] = {}

    def kv_batch_get(self, keys, partition_id, select_fields=None):
        assert partition_id == "train"
        return FakeBatch([{k: v for k, v in self.rows[key].items() if select_fields is None or k in select_fields}
                          for key in keys])

    def kv_batch_put(self, keys, partition_id, fields=None, tags=None):
        for i, key in enumerate(keys):
            row = self.rows.setdefault(key, {})
            for name in fields.keys():
                row[name] = fields[name][i]
            if tags is not None:
                self.tags[key] = tags[i]

    def kv_clear(self, keys, partition_id):
        for key in keys:
            self.rows.pop(key, None)
            self.tags.pop(key, None)

    def row(self, uid, session, record, response, acc):
        """One trajectory row as verl writes it (reward on the last response token)."""
        resp = torch.tensor(response, dtype=torch.int64)
        prompts = torch.tensor(self.PROMPT, dtype=torch.int64)
        ids = torch.cat([prompts, resp])
        rm = torch.zeros(len(response))
        rm[-1] = acc
        return {"uid": uid, "session_id": session, "index": record, "prompts": prompts, "responses": resp,
                "input_ids": ids, "position_ids": torch.arange(len(ids)), "response_mask": torch.ones_like(resp),
                "loss_mask": torch.ones_like(resp), "rm_scores": rm, "num_turns": 2,
                "rollout_log_probs": -0.1 * torch.arange(1, len(response) + 1, dtype=torch.float32),
                "dummy_tensor": torch.tensor([0], dtype=torch.uint8),
                "raw_prompt": [{"role": "user", "content": "q"}],
                "extra_fields": {"global_steps": 0, "min_global_steps": 0, "max_global_steps": 0,
                                 "reward_extra_info": {"score": acc, "acc": acc, "pred": "5" if acc else "-1"}}}

    def step(self, groups, step):
        """Write ``{uid: (record, [(response tokens, acc), ...])}`` as one step's batch; returns its KVBatchMeta."""
        self.rows.clear()
        self.tags.clear()
        keys, tags = [], []
        for uid, (record, sessions) in groups.items():
            for s, (resp, acc) in enumerate(sessions):
                key = f"{uid}_{s}_0"
                self.rows[key] = self.row(uid, s, record, resp, acc)
                tag = {"status": "success", "prompt_len": len(self.PROMPT), "response_len": len(resp),
                       "seq_len": len(self.PROMPT) + len(resp), "global_steps": step, "min_global_steps": step - 1,
                       "max_global_steps": step - 1}
                self.tags[key] = tag
                keys.append(key)
                tags.append(tag)
        return KVBatchMeta(partition_id="train", keys=keys, tags=tags)


@pytest.fixture
def fake_tq():
    return FakeTQ()
