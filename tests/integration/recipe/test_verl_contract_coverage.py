"""The verl contract (recipe/heapa/verl_contract.py) is complete, and the recipe never swaps a verl attribute.

**Complete.** Every private verl name the code under ``recipe/`` and ``verl_ext/`` touches is found here, from the
code itself, and must be listed in ``PRIVATE_NAMES`` (whose own test checks it against the installed verl):

- a private method or attribute that one of our classes overrides or sets, where a verl base class of it defines
  it (``_balance_batch``, ``_clear_groups``, ``_run_prompt``, a replica's ``_server_handle``);
- ``self._x`` in one of those classes, where ``_x`` is a verl base class's (``self._validate``);
- ``obj._x`` anywhere, where our code never defines ``_x`` and verl's source does (``worker_group._dispatch_info``).

**No swaps.** No statement under ``recipe/`` or ``verl_ext/`` assigns to an attribute of a verl module or class
(``tracking.FileLogger = ...``), and the trainer never assigns its worker groups (``self.actor_rollout_wg = ...``):
what the recipe changes in verl's behaviour goes through subclasses, hooks and verl's settings.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
import textwrap
from functools import cache
from pathlib import Path

from recipe.heapa.verl_contract import NON_PRIVATE_NAMES, PRIVATE_NAMES

REPO = Path(__file__).resolve().parents[3]
TOPS = ("recipe", "verl_ext")
IGNORED = {"_abc_impl"}  # the abc module's, on every ABC subclass


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__") and name not in IGNORED


def _files() -> list[Path]:
    return sorted(p for top in TOPS for p in (REPO / top).rglob("*.py"))


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def _verl_source() -> str:
    import verl

    return "\n".join(p.read_text(errors="replace") for p in Path(verl.__file__).parent.rglob("*.py"))


def _defined_by_us(trees) -> set[str]:
    names: set[str] = set()
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                names.add(node.attr)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, ast.arg):
                names.add(node.arg)
    return names


def _names_in_source(cls: type) -> set[str]:
    """Private names the class's own source defines (methods, class attributes) or reads and writes on ``self``.
    From the source, not ``vars(cls)``: verl sets class attributes on subclasses at run time (a reward manager's
    ``_class_initialized``), which would make the scan depend on what ran before it."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    body = tree.body[0].body
    names = {n.name for n in body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    names |= {t.id for n in body if isinstance(n, (ast.Assign, ast.AnnAssign))
              for t in (n.targets if isinstance(n, ast.Assign) else [n.target]) if isinstance(t, ast.Name)}
    names |= {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
              and n.value.id == "self"}
    return {n for n in names if _private(n)}


def _our_classes():
    for path in _files():
        if path.name == "__main__.py":
            continue
        module = importlib.import_module(_module_name(path))
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ == module.__name__:
                yield cls


def _other_modules(tree: ast.AST) -> set[str]:
    """Names bound to modules that are not verl's (``import os``: ``os._exit`` is not verl's)."""
    return {(a.asname or a.name).split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
            for a in node.names if a.name.split(".")[0] != "verl"}


def _is_verl(cls: type) -> bool:
    return cls.__module__.split(".")[0] == "verl"


def used_private_verl_names() -> dict[str, str]:
    """name -> where it is used (see the module docstring)."""
    found: dict[str, str] = {}
    for cls in _our_classes():
        verl_bases = [b for b in cls.__mro__ if _is_verl(b)]
        if not verl_bases:
            continue
        verl_sources = [inspect.getsource(b) for b in verl_bases]
        for ours in (b for b in cls.__mro__ if b.__module__.split(".")[0] in TOPS):
            names = _names_in_source(ours)
            for name in names:
                if any(name in vars(b) for b in verl_bases) or any(f"self.{name}" in s for s in verl_sources):
                    found.setdefault(name, f"{ours.__module__}.{ours.__qualname__}")
    trees = {path: ast.parse(path.read_text()) for path in _files()}
    ours = _defined_by_us(trees.values())
    verl = _verl_source()
    for path, tree in trees.items():
        other_modules = _other_modules(tree)
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and _private(node.attr) and node.attr not in ours
                    and not (isinstance(node.value, ast.Name) and node.value.id in other_modules)
                    and re.search(rf"\b{re.escape(node.attr)}\b", verl)):
                found.setdefault(node.attr, str(path.relative_to(REPO)))
    return found


def _listed() -> set[str]:
    return {n.attr or n.qualname.rsplit(".", 1)[-1] for n in PRIVATE_NAMES}


def test_the_contract_lists_every_private_verl_name_the_code_uses():
    found = used_private_verl_names()
    missing = {name: where for name, where in found.items() if name not in _listed()}
    assert not missing, f"private verl names used but not in verl_contract.PRIVATE_NAMES: {missing}"
    # the scan sees what it is meant to (a scan that finds nothing passes trivially)
    assert {"_balance_batch", "_clear_groups", "_run_prompt", "_dispatch_info", "_init_dataloader"} <= set(found)


def test_the_contract_lists_the_unprefixed_internals_it_reads():
    listed = {n.attr or n.qualname.rsplit(".", 1)[-1] for n in NON_PRIVATE_NAMES}
    assert {"timing_raw", "agent_loop_workers_class", "trainer_mode", "parameter_sync_step"} <= listed


def _assigned_targets(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                yield node, target
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr":
            yield node, node.args[0] if node.args else None


def _verl_aliases(tree: ast.AST) -> set[str]:
    """Names a module binds to verl modules or classes (``from verl.utils import tracking``, ``import verl``)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "verl":
            names.update(a.asname or a.name for a in node.names)
        elif isinstance(node, ast.Import):
            names.update((a.asname or a.name).split(".")[0] for a in node.names if a.name.split(".")[0] == "verl")
    return names


def test_no_verl_attribute_is_reassigned_at_run_time():
    offences = []
    for path in _files():
        tree = ast.parse(path.read_text())
        verl_names = _verl_aliases(tree)
        for node, target in _assigned_targets(tree):
            where = f"{path.relative_to(REPO)}:{node.lineno}"
            if isinstance(node, ast.Call):  # setattr(x, ...) on a verl module or class
                if isinstance(target, ast.Name) and target.id in verl_names:
                    offences.append(f"{where} setattr on verl's {target.id}")
                continue
            if isinstance(target, ast.Attribute):
                if isinstance(target.value, ast.Name) and target.value.id in verl_names:
                    offences.append(f"{where} {target.value.id}.{target.attr} = ...")
                if target.attr.endswith("_wg") and isinstance(target.value, ast.Name) and target.value.id == "self":
                    offences.append(f"{where} self.{target.attr} = ... (a verl worker group swapped)")
    assert not offences, "\n".join(offences)


def test_the_swap_check_sees_a_swap(tmp_path):
    tree = ast.parse("from verl.utils import tracking\ntracking.FileLogger = object\nself.actor_rollout_wg = 1\n")
    verl_names = _verl_aliases(tree)
    targets = [t for _, t in _assigned_targets(tree)]
    assert verl_names == {"tracking"}
    assert any(isinstance(t, ast.Attribute) and t.value.id in verl_names for t in targets)
    assert any(isinstance(t, ast.Attribute) and t.attr.endswith("_wg") for t in targets)
