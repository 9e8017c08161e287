"""Errors raised by the pool core.

Each misuse gets its own class so callers (adapters, tests) can react to exactly one failure mode; they subclass
``KeyError``/``ValueError`` so generic handlers written against the builtins keep working.
"""

from __future__ import annotations


class UnknownRecordError(KeyError):
    """An id that the pool does not hold (never added, or already evicted)."""

    def __str__(self) -> str:  # KeyError quotes its argument; a sentence reads better unquoted.
        return str(self.args[0]) if self.args else "unknown record"


class DuplicateRecordError(ValueError):
    """An id that is already held (adding the same record id twice)."""


class RecordStateError(ValueError):
    """An operation that needs a record in another state (e.g. feedback for a record that is not in flight)."""


class PoolFullError(ValueError):
    """An unscored insert into a full pool that holds no scored record to evict."""


class ConfigError(ValueError):
    """A bad configuration value; the message names the field and the allowed values."""
