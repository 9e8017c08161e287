#!/usr/bin/env bash
# Regenerate scripts/constraints-gpu.txt: resolve `.[test,gpu]` with a current pip's `--dry-run --report` (nothing is
# installed; no CUDA needed) and pin every package it would install. Run after a dependency change in setup.py,
# commit the result; setup_env.sh installs the GPU path with it and tests/integration/recipe/ops/test_gpu_launchers.py
# checks the GPU launchers against it. Takes ~1 min with a current pip (pip 23.x may backtrack for many minutes).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python3}"
OUT="${OUT:-$ROOT/scripts/constraints-gpu.txt}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
"$PYTHON" -m venv "$work/venv"
"$work/venv/bin/python" -m pip install --quiet --upgrade "pip>=25.1"
# -c /dev/null: a machine-wide pip constraint (e.g. a torch cap) must not shape the cluster's set
PIP_CONSTRAINT= "$work/venv/bin/python" -m pip install --dry-run --ignore-installed --quiet -c /dev/null \
  --report "$work/report.json" "$ROOT[test,gpu]"
"$PYTHON" - "$work/report.json" "$OUT" <<'PY'
import json, sys
report, out = sys.argv[1], sys.argv[2]
header = [line for line in open(out, encoding="utf-8") if line.startswith("#")] if __import__("os").path.exists(out) else []
pins = sorted((i["metadata"]["name"], i["metadata"]["version"]) for i in json.load(open(report))["install"]
              if i["metadata"]["name"].lower() != "verl-heapa")
with open(out, "w", encoding="utf-8") as f:
    f.writelines(header)
    f.writelines(f"{name}=={version}\n" for name, version in pins)
print(f"{len(pins)} pins -> {out}")
PY
