"""Every reader of the trainer config's ``heapa:`` block settles its moved keys the same way: AR3PO's agent loop
reads a null (unset) ``heapa.ar3po.success_threshold`` as the pool's pass threshold."""

from __future__ import annotations

from omegaconf import OmegaConf

from verl_ext.adapters.ar3po_agent_loop import ar3po_settings
from verl_ext.adapters.heapa_block import apply_moved_keys


def test_ar3po_workers_take_the_pools_pass_threshold_unless_the_old_key_is_set():
    config = OmegaConf.create({"heapa": {"ar3po": {"enabled": True, "success_threshold": None},
                                         "feedback": {"acc_field": "acc", "pass_threshold": 0.3}}})
    cfg, acc_field = ar3po_settings(config)
    assert cfg.success_threshold == 0.3 and acc_field == "acc"
    config.heapa.ar3po.success_threshold = 0.7
    assert ar3po_settings(config)[0].success_threshold == 0.7
    config.heapa.ar3po.enabled = False
    assert ar3po_settings(config)[0] is None


def test_unset_moved_keys_are_dropped_and_set_ones_stay(caplog):
    block = apply_moved_keys({"pool": {"boundary": None, "cold_fraction": 0.3, "max_pool_size": 5}}, warn=False)
    assert block["pool"] == {"cold_fraction": 0.3, "max_pool_size": 5}
    assert block["ar3po"] == {"success_threshold": 0.5} and not caplog.records
