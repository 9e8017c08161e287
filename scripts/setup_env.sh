#!/usr/bin/env bash
# Make the project's virtual environment: `bash scripts/setup_env.sh` from anywhere.
#
# - Creates $VENV (default <repo>/.venv) with $PYTHON (default python3) when it is missing.
# - Upgrades pip (>= 25.1) first, whichever the device.
# - CPU machine (no working `nvidia-smi`): installs torch==2.13.0 (the CPU build) FIRST, so that nothing later
#   resolves a multi-GB CUDA torch, then `pip install -e ".[test]" -c scripts/constraints-cpu.txt`: the versions CI
#   tests, so the resolver has nothing to search (CONSTRAINTS= empty uses setup.py's ranges alone).
# - GPU machine (`nvidia-smi` works): checks that the driver supports CUDA >= 13.0 (torch 2.11.0 on PyPI is built
#   for CUDA 13.0) BEFORE installing anything, then
#   `pip install -e ".[test,gpu]" -c scripts/constraints-gpu.txt`: verl 0.9.1's own vllm set (vllm 0.24.0, torch
#   2.11.0, transformers 5.9.0), resolved once by `scripts/lock_gpu.sh`. flash-attn is not in it (no binary wheel on
#   PyPI): the launchers then use sdpa attention; FLASH_ATTN=1 also builds flash-attn (needs the CUDA toolkit's
#   nvcc; long). An older driver stops here with the versions needed; TORCH_INDEX_URL=<PyTorch's cu12x wheel index>
#   installs torch 2.11.0 for that CUDA from there instead (not exercised by this project: vLLM's own kernels must
#   match it), VERL_EXT_CUDA_CHECK=0 skips the check. The CPU build is 2.13.0 because that is the CPU wheel at hand;
#   the project uses only torch APIs both versions share (torch.utils.data, tensors) — see docs/run_files.md.
#   Force either kind with VERL_EXT_DEVICE=cpu|gpu. SETUP_DRY_RUN=1 prints the install commands instead of running them.
# - Idempotent: a stamp file in the venv records a hash of setup.py/pyproject.toml, the python version and the
#   device kind; when it matches (and verl_ext imports), nothing is reinstalled. FORCE=1 reinstalls anyway.
#
# Knobs (environment): VENV, PYTHON, VERL_EXT_DEVICE, TORCH_CPU_VERSION (default 2.13.0), CONSTRAINTS, FORCE,
# VERL_EXT_CUDA_CHECK, TORCH_INDEX_URL, FLASH_ATTN, SETUP_DRY_RUN.
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

CONSTRAINTS="${CONSTRAINTS-$REPO/scripts/constraints-$device.txt}"
GPU_TORCH_VERSION=2.11.0  # the torch of constraints-gpu.txt
GPU_MIN_CUDA=13.0         # the CUDA its PyPI wheels are built for (nvidia-*-cu13)
run() { if [[ "${SETUP_DRY_RUN:-0}" == 1 ]]; then printf '[setup_env] would run:'; printf ' %q' "$@"; printf '\n'; else "$@"; fi; }

if [[ "$device" == gpu && "${VERL_EXT_CUDA_CHECK:-1}" != 0 && -z "${TORCH_INDEX_URL:-}" ]]; then
  # nvidia-smi's header names the newest CUDA the driver supports ("CUDA Version: 12.4")
  driver_cuda="$(nvidia-smi 2>/dev/null | sed -n 's/.*CUDA Version: *\([0-9][0-9]*\.[0-9][0-9]*\).*/\1/p' | head -n1)"
  driver="$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -n1 || true)"
  [[ -n "$driver_cuda" ]] || die "could not read the driver's CUDA version from nvidia-smi; VERL_EXT_CUDA_CHECK=0 skips this check"
  if ! "$PYTHON" -c "import sys; v=lambda s: tuple(int(x) for x in s.split('.')); sys.exit(v('$driver_cuda') < v('$GPU_MIN_CUDA'))"; then
    die "the NVIDIA driver${driver:+ $driver} supports CUDA $driver_cuda, but the GPU set (torch $GPU_TORCH_VERSION, vllm 0.24.0; scripts/constraints-gpu.txt) is built for CUDA $GPU_MIN_CUDA and needs a driver that supports it (R580 or newer). Either upgrade the driver, or take torch $GPU_TORCH_VERSION built for your CUDA from PyTorch's wheel index: TORCH_INDEX_URL=<PyTorch's cu12x index, e.g. .../whl/cu128> bash scripts/setup_env.sh (vLLM's kernels must match that CUDA; not exercised by this project), or skip this check with VERL_EXT_CUDA_CHECK=0."
  fi
  log "driver${driver:+ $driver} supports CUDA $driver_cuda (>= $GPU_MIN_CUDA needed)"
fi

deps_hash="$(cat "$REPO/setup.py" "$REPO/pyproject.toml" "$REPO/scripts/constraints-cpu.txt" \
             "$REPO/scripts/constraints-gpu.txt" | sha256sum | cut -c1-16)"
want_stamp="$deps_hash $("$PYTHON" -V 2>&1 | tr ' ' '-') $device ${TORCH_INDEX_URL:-} ${FLASH_ATTN:-0}"
stamp="$VENV/.verl_ext_setup_stamp"

if [[ "${SETUP_DRY_RUN:-0}" != 1 && ! -x "$VENV/bin/python" ]]; then
  log "creating virtual environment $VENV ($("$PYTHON" -V 2>&1))"
  "$PYTHON" -m venv "$VENV" || die "python -m venv failed (on Debian/Ubuntu: apt-get install python3-venv)"
fi
PY="$VENV/bin/python"

if [[ "${SETUP_DRY_RUN:-0}" != 1 && "${FORCE:-0}" != 1 && -f "$stamp" && "$(cat "$stamp")" == "$want_stamp" ]] \
   && "$PY" -c 'import verl_ext, verl, torch' >/dev/null 2>&1; then
  log "up to date ($VENV, $device); FORCE=1 reinstalls"
  exit 0
fi

start=$SECONDS
export PIP_DISABLE_PIP_VERSION_CHECK=1
# pip 23.x backtracks for many minutes through the GPU set, and downloads whole wheels to read their metadata
# where pip >= 25 reads the index's metadata files (the GPU set's dry-run resolution in
# tests/integration/recipe/ops/test_gpu_launchers.py: 3.4 GB and 124 CPU-s with pip 23.2, 45 CPU-s with 26.3)
log "upgrading pip"
run "$PY" -m pip install --upgrade "pip>=25.1" || die "could not upgrade pip"
if [[ "$device" == cpu ]]; then
  if "$PY" -c "import torch, sys; sys.exit(0 if torch.__version__.split('+')[0] == '$TORCH_CPU_VERSION' else 1)" \
       >/dev/null 2>&1; then
    log "torch $TORCH_CPU_VERSION already installed"
  else
    log "no GPU: installing the CPU build torch==$TORCH_CPU_VERSION first (so nothing pulls a CUDA torch)"
    run "$PY" -m pip install "torch==$TORCH_CPU_VERSION" || die "could not install torch==$TORCH_CPU_VERSION"
  fi
fi

constraint_args=()
index_args=()
if [[ "$device" == gpu ]]; then
  if [[ -n "${TORCH_INDEX_URL:-}" ]]; then
    # torch from the given index; the CUDA-13 wheels of the lock would fight it, so they are left unpinned
    filtered="$VENV/constraints-gpu-without-cuda.txt"
    if [[ "${SETUP_DRY_RUN:-0}" != 1 ]]; then
      grep -viE '^(torch|torchvision|torchaudio|triton|nvidia-[a-z0-9-]+|cuda-[a-z0-9-]+)==' "$CONSTRAINTS" > "$filtered"
    fi
    CONSTRAINTS="$filtered"
    index_args=(--extra-index-url "$TORCH_INDEX_URL")
    log "torch $GPU_TORCH_VERSION from $TORCH_INDEX_URL"
    run "$PY" -m pip install "${index_args[@]}" "torch==$GPU_TORCH_VERSION" || die "could not install torch from $TORCH_INDEX_URL"
  fi
fi
if [[ -n "$CONSTRAINTS" ]]; then constraint_args=(-c "$CONSTRAINTS"); fi
log "installing the project: pip install -e \".[$extras]\" ${constraint_args[*]}"
run "$PY" -m pip install -e "$REPO[$extras]" "${constraint_args[@]}" "${index_args[@]}" \
  || die "pip install -e \".[$extras]\" failed"
if [[ "$device" == gpu && "${FLASH_ATTN:-0}" == 1 ]]; then
  # compiles against the installed torch with the CUDA toolkit's nvcc (tens of minutes; MAX_JOBS bounds memory)
  log "building flash-attn (FLASH_ATTN=1)"
  run "$PY" -m pip install flash-attn --no-build-isolation \
    || die "flash-attn did not build (it needs nvcc matching torch's CUDA); without FLASH_ATTN=1 the launchers use sdpa"
fi
if [[ "${SETUP_DRY_RUN:-0}" == 1 ]]; then exit 0; fi

if [[ "$device" == cpu ]]; then
  got="$("$PY" -c 'import torch; print(torch.__version__)')"
  [[ "${got%%+*}" == "$TORCH_CPU_VERSION" ]] \
    || die "torch changed to $got while installing the project (expected $TORCH_CPU_VERSION, CPU build)"
fi
"$PY" -c 'import verl_ext.plugin, verl' || die "installed, but 'import verl_ext.plugin' fails (see above)"

printf '%s\n' "$want_stamp" > "$stamp"
log "done in $((SECONDS - start)) s: $VENV ($device; torch $("$PY" -c 'import torch; print(torch.__version__)'))"
