#!/usr/bin/env bash
# Make the project's virtual environment: `bash scripts/setup_env.sh` from anywhere.
#
# - Creates $VENV (default <repo>/.venv) with $PYTHON (default python3) when it is missing.
# - CPU machine (no working `nvidia-smi`): installs torch==2.13.0 (the CPU build) FIRST, so that nothing later
#   resolves a multi-GB CUDA torch, then `pip install -e ".[test]" -c scripts/constraints-cpu.txt`: the versions CI
#   tests, so the resolver has nothing to search (CONSTRAINTS= empty uses setup.py's ranges alone).
# - GPU machine (`nvidia-smi` works): `pip install -e ".[test,gpu]"`: verl 0.9.1's own vllm set (vllm 0.24.0,
#   torch 2.11.0, transformers 5.9.0). The CPU build is 2.13.0 because that is the CPU wheel at hand; the project
#   uses only torch APIs both versions share (torch.utils.data, tensors) — see docs/run_files.md.
#   Force either with VERL_EXT_DEVICE=cpu|gpu.
# - Idempotent: a stamp file in the venv records a hash of setup.py/pyproject.toml, the python version and the
#   device kind; when it matches (and verl_ext imports), nothing is reinstalled. FORCE=1 reinstalls anyway.
#
# Knobs (environment): VENV, PYTHON, VERL_EXT_DEVICE, TORCH_CPU_VERSION (default 2.13.0), CONSTRAINTS, FORCE.
set -euo pipefail

log() { printf '[setup_env] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${VENV:-$REPO/.venv}"
PYTHON="${PYTHON:-python3}"
TORCH_CPU_VERSION="${TORCH_CPU_VERSION:-2.13.0}"

command -v "$PYTHON" >/dev/null 2>&1 || die "no python interpreter '$PYTHON' (set PYTHON=/path/to/python3.10+)"
"$PYTHON" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else 1)' \
  || die "$PYTHON is $("$PYTHON" -V 2>&1); verl 0.9.1 needs Python >= 3.10"

device="${VERL_EXT_DEVICE:-}"
if [[ -z "$device" ]]; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then device=gpu; else device=cpu; fi
fi
case "$device" in
  cpu) extras="test" ;;
  gpu) extras="test,gpu" ;;
  *) die "VERL_EXT_DEVICE must be cpu or gpu, got '$device'" ;;
esac

CONSTRAINTS="${CONSTRAINTS-$REPO/scripts/constraints-cpu.txt}"
deps_hash="$(cat "$REPO/setup.py" "$REPO/pyproject.toml" "$REPO/scripts/constraints-cpu.txt" | sha256sum | cut -c1-16)"
want_stamp="$deps_hash $("$PYTHON" -V 2>&1 | tr ' ' '-') $device"
stamp="$VENV/.verl_ext_setup_stamp"

if [[ ! -x "$VENV/bin/python" ]]; then
  log "creating virtual environment $VENV ($("$PYTHON" -V 2>&1))"
  "$PYTHON" -m venv "$VENV" || die "python -m venv failed (on Debian/Ubuntu: apt-get install python3-venv)"
fi
PY="$VENV/bin/python"

if [[ "${FORCE:-0}" != 1 && -f "$stamp" && "$(cat "$stamp")" == "$want_stamp" ]] \
   && "$PY" -c 'import verl_ext, verl, torch' >/dev/null 2>&1; then
  log "up to date ($VENV, $device); FORCE=1 reinstalls"
  exit 0
fi

start=$SECONDS
export PIP_DISABLE_PIP_VERSION_CHECK=1
if [[ "$device" == cpu ]]; then
  if "$PY" -c "import torch, sys; sys.exit(0 if torch.__version__.split('+')[0] == '$TORCH_CPU_VERSION' else 1)" \
       >/dev/null 2>&1; then
    log "torch $TORCH_CPU_VERSION already installed"
  else
    log "no GPU: installing the CPU build torch==$TORCH_CPU_VERSION first (so nothing pulls a CUDA torch)"
    "$PY" -m pip install "torch==$TORCH_CPU_VERSION" || die "could not install torch==$TORCH_CPU_VERSION"
  fi
fi

constraint_args=()
if [[ "$device" == cpu && -n "$CONSTRAINTS" ]]; then constraint_args=(-c "$CONSTRAINTS"); fi
log "installing the project: pip install -e \".[$extras]\" ${constraint_args[*]}"
"$PY" -m pip install -e "$REPO[$extras]" "${constraint_args[@]}" || die "pip install -e \".[$extras]\" failed"

if [[ "$device" == cpu ]]; then
  got="$("$PY" -c 'import torch; print(torch.__version__)')"
  [[ "${got%%+*}" == "$TORCH_CPU_VERSION" ]] \
    || die "torch changed to $got while installing the project (expected $TORCH_CPU_VERSION, CPU build)"
fi
"$PY" -c 'import verl_ext.plugin, verl' || die "installed, but 'import verl_ext.plugin' fails (see above)"

printf '%s\n' "$want_stamp" > "$stamp"
log "done in $((SECONDS - start)) s: $VENV ($device; torch $("$PY" -c 'import torch; print(torch.__version__)'))"
