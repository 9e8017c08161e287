#!/usr/bin/env bash
# The CPU comparison experiment (issue 14): every method preset x SEEDS on the embedded CPU default, then
# `python -m verl_ext.compare` over all runs. An experiment (tens of minutes on 2 cores), not a CI test.
#
#   bash examples/cpu_compare.sh                # every preset (the paper's five first) x seeds 0 1 2
#   SEEDS="0 1" STEPS=40 METHODS="grpo heapa_grpo" bash examples/cpu_compare.sh trainer.test_freq=4
#   DRY_RUN=1 bash examples/cpu_compare.sh      # print the commands, run nothing
#
# Each run: scripts/run_<method>_qwen.sh with FORCE_CPU=1, EXP_NAME=<method>_s<seed>,
# OUT_DIR=$OUT_ROOT/<method>_s<seed>, seeded through heapa.seed, data.seed, the actor's data_loader_seed,
# rollout.seed and the hf rollout server's seed; extra arguments are Hydra overrides passed to every run. A preset
# without a launcher script runs through scripts/_launch.sh with METHOD set (what every launcher does). Runs wait
# on the shared lock (LOCK, empty = none) so two Ray clusters never share the 2 cores. A run whose metrics already
# reach STEPS is skipped (SKIP_DONE=0 reruns it); a failed run is reported and the others continue; the
# comparison covers the runs that finished.
#
# Knobs: SEEDS (default "0 1 2"), STEPS (40, the launcher's CPU default), METHODS (default: grpo dapo ps
# heapa_grpo heapa_dapo, then every other preset in recipe/heapa/config/method/), TEST_FREQ (10; a validation
# samples 512 problems, ~20 s),
# OUT_ROOT (outputs/cpu_compare), COMPARE_OUT ($OUT_ROOT/compare), RESUME_MODE (disable: each run starts fresh),
# LOCK (/tmp/verl_ext_e2e.lock), SKIP_DONE (1), DRY_RUN (0), PYTHON, TAG (empty; runs are named
# <method><TAG>_s<seed>, so a variant given by overrides is its own method in the table:
# TAG=_progress METHODS=heapa_grpo bash examples/cpu_compare.sh heapa.selection.kwargs.boundary=progress),
# KEEP_DIR (empty: none): each finished run's metrics are also kept, trimmed and gzipped, in KEEP_DIR/<name>/
# (`python -m verl_ext.compare.keep`) and the comparison then reads every run kept there, so an experiment spread
# over days (and machines) is one table:
#   KEEP_DIR=results/cpu_compare SEEDS="3 4" METHODS=grpo bash examples/cpu_compare.sh
#   python -m verl_ext.compare results/cpu_compare/*/ --out compare/     # the table from the kept runs alone
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
if [[ -z "${PYTHON:-}" ]]; then
  if [[ -x "$ROOT/.venv/bin/python" ]]; then PYTHON="$ROOT/.venv/bin/python"; else PYTHON=python3; fi
fi
SEEDS="${SEEDS:-0 1 2}"
SEEDS="${SEEDS//,/ }"
STEPS="${STEPS:-40}"
TEST_FREQ="${TEST_FREQ:-10}"
OUT_ROOT="${OUT_ROOT:-$ROOT/outputs/cpu_compare}"
COMPARE_OUT="${COMPARE_OUT:-$OUT_ROOT/compare}"
RESUME_MODE="${RESUME_MODE:-disable}"
LOCK="${LOCK-/tmp/verl_ext_e2e.lock}"
SKIP_DONE="${SKIP_DONE:-1}"
DRY_RUN="${DRY_RUN:-0}"
KEEP_DIR="${KEEP_DIR:-}"
TAG="${TAG:-}"
if [[ -n "$TAG" && ! "$TAG" =~ ^[A-Za-z0-9_.-]+$ ]]; then
  echo "cpu_compare: TAG '$TAG' must be letters, digits, _ . -" >&2; exit 2
fi
PRESET_DIR="$ROOT/recipe/heapa/config/method"

if [[ -z "${METHODS:-}" ]]; then
  METHODS="grpo dapo ps heapa_grpo heapa_dapo"
  for f in "$PRESET_DIR"/*.yaml; do
    m="$(basename "$f" .yaml)"
    [[ " $METHODS " == *" $m "* ]] || METHODS="$METHODS $m"
  done
fi
METHODS="${METHODS//,/ }"
for m in $METHODS; do
  [[ -f "$PRESET_DIR/$m.yaml" ]] || { echo "cpu_compare: no preset $PRESET_DIR/$m.yaml for method $m" >&2; exit 2; }
done
for s in $SEEDS; do
  [[ "$s" =~ ^[0-9]+$ ]] || { echo "cpu_compare: seed '$s' is not a non-negative integer" >&2; exit 2; }
done

done_steps() {  # the last step in a run's metrics.jsonl (0 when there is none)
  "$PYTHON" - "$1" <<'EOF'
import json, sys
last = 0
try:
    with open(sys.argv[1], encoding="utf-8") as f:
        for line in f:
            try:
                last = max(last, int(json.loads(line)["step"]))
            except (ValueError, KeyError, TypeError):
                pass
except FileNotFoundError:
    pass
print(last)
EOF
}

run_cmd() {  # the command for one method x seed, one word per array element
  local m="$1" s="$2" name="$1${TAG}_s$2"
  CMD=(env FORCE_CPU=1 STEPS="$STEPS" EXP_NAME="$name" OUT_DIR="$OUT_ROOT/$name" RESUME_MODE="$RESUME_MODE")
  [[ -n "$LOCK" ]] && CMD=(flock "$LOCK" "${CMD[@]}")
  if [[ -f "$ROOT/scripts/run_${m}_qwen.sh" ]]; then
    CMD+=(bash "$ROOT/scripts/run_${m}_qwen.sh")
  elif [[ "$m" == ar3po_* || "$m" == heapa_ar3po ]]; then  # its launcher sets AR3PO's CPU stages
    CMD+=(METHOD="$m" bash "$ROOT/scripts/run_ar3po_qwen.sh")
  elif [[ "$m" == hive_* ]]; then
    CMD+=(METHOD="$m" bash "$ROOT/scripts/run_hive_qwen.sh")
  elif [[ "$m" == *reinforce_ada* ]]; then
    CMD+=(METHOD="$m" bash "$ROOT/scripts/run_reinforce_ada_qwen.sh")
  else
    CMD+=(bash -c 'METHOD="$0"; source "$1" "${@:2}"' "$m" "$ROOT/scripts/_launch.sh")
  fi
  CMD+=(heapa.seed="$s" data.seed="$s" actor_rollout_ref.actor.data_loader_seed="$s" actor_rollout_ref.rollout.seed="$s"
        +actor_rollout_ref.rollout.engine_kwargs.hf.seed="$s" trainer.test_freq="$TEST_FREQ" "${EXTRA[@]}")
}

EXTRA=("$@")
RUN_DIRS=()
FAILED=()
for m in $METHODS; do
  for s in $SEEDS; do
    name="${m}${TAG}_s${s}"
    run_cmd "$m" "$s"
    if [[ "$DRY_RUN" == "1" ]]; then
      printf '%q ' "${CMD[@]}"; printf '\n'
      RUN_DIRS+=("$OUT_ROOT/$name")
      continue
    fi
    if [[ "$SKIP_DONE" == "1" && "$(done_steps "$OUT_ROOT/$name/metrics.jsonl")" -ge "$STEPS" ]]; then
      echo "cpu_compare: $name already reached step $STEPS, skipped" >&2
      RUN_DIRS+=("$OUT_ROOT/$name")
      continue
    fi
    mkdir -p "$OUT_ROOT/$name"
    echo "cpu_compare: running $name ($(date +%H:%M:%S))" >&2
    if "${CMD[@]}" >"$OUT_ROOT/$name/launcher.log" 2>&1; then
      RUN_DIRS+=("$OUT_ROOT/$name")
    else
      echo "cpu_compare: $name failed (exit $?); see $OUT_ROOT/$name/launcher.log" >&2
      FAILED+=("$name")
    fi
  done
done

if [[ -n "$KEEP_DIR" && "$DRY_RUN" != "1" ]]; then  # keep this invocation's runs, then compare every kept run
  [[ ${#RUN_DIRS[@]} -eq 0 ]] || "$PYTHON" -m verl_ext.compare.keep "${RUN_DIRS[@]}" --into "$KEEP_DIR"
  RUN_DIRS=()
  for d in "$KEEP_DIR"/*/; do [[ -f "$d/metrics.jsonl.gz" || -f "$d/metrics.jsonl" ]] && RUN_DIRS+=("${d%/}"); done
fi
COMPARE=("$PYTHON" -m verl_ext.compare "${RUN_DIRS[@]}" --out "$COMPARE_OUT")
if [[ "$DRY_RUN" == "1" ]]; then
  printf '%q ' "${COMPARE[@]}"; printf '\n'
  exit 0
fi
if [[ ${#RUN_DIRS[@]} -gt 0 ]]; then
  "${COMPARE[@]}"
fi
if [[ ${#FAILED[@]} -gt 0 ]]; then
  echo "cpu_compare: ${#FAILED[@]} run(s) failed: ${FAILED[*]}" >&2
  exit 1
fi
