"""The package's import graph: no cycles (lazy, function-level imports included), and the pure core imports no
verl, ray or torch (docs/architecture.md: the core packages are framework-free)."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CORE = ("verl_ext.pool", "verl_ext.selection", "verl_ext.augment", "verl_ext.ar3po", "verl_ext.allocation",
        "verl_ext.reward", "verl_ext.sim")
FRAMEWORKS = ("verl", "ray", "torch", "transfer_queue")


def modules() -> dict[str, Path]:
    out = {}
    for top in ("verl_ext", "recipe"):
        for path in (REPO / top).rglob("*.py"):
            name = ".".join(path.relative_to(REPO).with_suffix("").parts)
            out[name[: -len(".__init__")] if name.endswith(".__init__") else name] = path
    return out


def imports(name: str, path: Path, known: dict[str, Path]) -> tuple[set[str], set[str]]:
    """(project modules, top-level names) imported anywhere in the file; ``from pkg import sub`` counts as sub."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    inner, outer = set(), set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            subs = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in known]
            targets = subs or [base]
        else:
            continue
        for t in targets:
            outer.add(t.split(".")[0])
            if t in known:
                inner.add(t)
    return inner, outer


def test_no_import_cycles():
    known = modules()
    graph = {m: imports(m, p, known)[0] - {m} for m, p in known.items()}
    index, low, stack, on, cycles = {}, {}, [], set(), []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    assert cycles == [], f"import cycles: {cycles}"


def test_the_core_imports_no_framework():
    known = modules()
    bad = {m: sorted(imports(m, p, known)[1] & set(FRAMEWORKS)) for m, p in known.items() if m.startswith(CORE)}
    assert {m: f for m, f in bad.items() if f} == {}


def test_the_pool_stores_and_never_selects():
    """Layering (issue 19): selection rules (HeaPA's frontier among them) read the pool through its public API;
    the pool keeps storage, estimators, capacity and lineage and must not reach back into ``verl_ext.selection``."""
    known = modules()
    bad = {m: sorted(t for t in imports(m, p, known)[0] if t.startswith("verl_ext.selection"))
           for m, p in known.items() if m.startswith("verl_ext.pool")}
    assert {m: t for m, t in bad.items() if t} == {}
