"""The recipe's layout rules (docs/architecture.md): rooms of at most 12 files, hooks that hand over in a few lines."""

from __future__ import annotations

import inspect
from pathlib import Path

from recipe.heapa.trainer import HeapaTrainer

RECIPE = Path(__file__).resolve().parents[3] / "recipe" / "heapa"
MAX_FILES, MAX_HOOK_LINES = 12, 15


def test_no_room_holds_more_than_twelve_files():
    # A Hydra config group (config/method, config/platform) is a menu, one file per `method=<name>`: its size is the
    # number of choices, and a sub-folder would change the names users type.
    groups = {RECIPE / "config" / "method", RECIPE / "config" / "platform"}
    rooms = [RECIPE, *(p for p in RECIPE.rglob("*") if p.is_dir() and p.name != "__pycache__" and p not in groups)]
    crowded = {str(r.relative_to(RECIPE)): n for r in rooms
               if (n := sum(1 for f in r.iterdir() if f.is_file() and f.suffix in (".py", ".yaml"))) > MAX_FILES}
    assert not crowded, f"rooms over {MAX_FILES} files: {crowded}"


def _verl_hooks() -> list[tuple[str, type]]:
    """Every method of ``HeapaTrainer`` (its own or its mixins') that overrides one of verl's trainer classes."""
    verl = [c for c in HeapaTrainer.__mro__ if c.__module__.startswith("verl.")]
    ours = [c for c in HeapaTrainer.__mro__ if c.__module__.startswith("recipe.")]
    return [(name, cls) for cls in ours for name, value in vars(cls).items()
            if inspect.isfunction(value) and any(name in vars(v) for v in verl)]


def test_every_hook_override_hands_over_in_at_most_fifteen_lines():
    hooks = _verl_hooks()
    assert {"step", "_balance_batch", "_update_actor", "on_step_begin", "_init_dataloader"} <= {n for n, _ in hooks}
    long = {}
    for name, cls in hooks:
        lines = inspect.getsource(vars(cls)[name]).splitlines()
        body = [ln for ln in lines[1:] if ln.strip() and not ln.strip().startswith("#")]  # after the def line
        if len(body) > MAX_HOOK_LINES:
            long[f"{cls.__name__}.{name}"] = len(body)
    assert not long, f"hook overrides over {MAX_HOOK_LINES} lines: {long}"
