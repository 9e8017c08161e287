"""The one check every checkpointed component runs on the state it is handed: its schema version.

A state written by other code (an older release, a different component) must fail on load with the component's
name, the version found and the versions this code reads, not later with a ``KeyError``. Framework-free: the core
packages use it too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def check_schema(state: Mapping[str, Any], owner: str, *readable: int, key: str = "schema_version",
                 error: type[Exception] = ValueError) -> int:
    """The state's version when it is one of ``readable``; otherwise ``error`` naming ``owner`` and both."""
    version = state.get(key) if isinstance(state, Mapping) else None
    if version not in readable:
        reads = " and ".join(str(v) for v in readable)
        raise error(f"{owner} state has {key} {version!r}; this code reads {reads}")
    return version
