"""Config plumbing shared by the adapters: verl hands over OmegaConf nodes, the core wants plain dicts."""

from __future__ import annotations

from typing import Any


def as_dict(value: Any) -> dict | None:
    """A plain dict from a dict / OmegaConf node / mapping / None (omegaconf is imported only when needed)."""
    if value is None or isinstance(value, dict):
        return value
    from omegaconf import DictConfig, OmegaConf  # ships with verl

    if isinstance(value, DictConfig):
        return OmegaConf.to_container(value, resolve=True)
    return dict(value)
