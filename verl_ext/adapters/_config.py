"""Config plumbing shared by the adapters: verl hands over OmegaConf nodes, the core wants plain dicts; the
project's log level comes from the environment (it must reach every Ray worker, which sees no Hydra config)."""

from __future__ import annotations

import logging
import os
from typing import Any

LOG_LEVEL_ENV = "VERL_EXT_LOG_LEVEL"
LOGGER_NAMES = ("verl_ext", "recipe")


def configure_logging(default: str = "INFO") -> str:
    """Give the project's loggers their own level (``$VERL_EXT_LOG_LEVEL``, default INFO); returns it.

    ``import verl`` sets the root logger to WARNING, which hid every INFO line of the recipe; a level set on our
    top-level loggers wins for their records, which still reach the root's handler.
    """
    level = os.environ.get(LOG_LEVEL_ENV, default).strip().upper()
    if not isinstance(logging.getLevelName(level), int):  # the name -> number lookup (Python 3.10 too)
        raise ValueError(f"{LOG_LEVEL_ENV}={level!r} is not a logging level (DEBUG, INFO, WARNING, ERROR)")
    for name in LOGGER_NAMES:
        logging.getLogger(name).setLevel(level)
    return level


def as_dict(value: Any) -> dict | None:
    """A plain dict from a dict / OmegaConf node / mapping / None (omegaconf is imported only when needed)."""
    if value is None or isinstance(value, dict):
        return value
    from omegaconf import DictConfig, OmegaConf  # ships with verl

    if isinstance(value, DictConfig):
        return OmegaConf.to_container(value, resolve=True)
    return dict(value)
