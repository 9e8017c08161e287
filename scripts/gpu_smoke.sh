#!/usr/bin/env bash
# GPU smoke test: every preset for 2 steps on ONE GPU with the vLLM rollout and the project's own assets (profile
# `gpu` of verl_ext.cpu.assets: a Qwen2-architecture model with 64-dim attention heads and a locally trained
# tokenizer, no model hub), a checkpoint at step 2, then `python -m verl_ext.evaluation generate --backend vllm` of
# one checkpoint. Prints a table (exit code, wall time, step time, peak GPU memory, throughput) and writes it to
# $OUT/summary.md. Budget: about 8 minutes on one H100/H200 (not yet measured: no GPU has been lent to this project).
#
#   bash scripts/gpu_smoke.sh                      # all presets
#   METHODS="grpo heapa_dapo" bash scripts/gpu_smoke.sh
#   SMOKE_DRY_RUN=1 bash scripts/gpu_smoke.sh      # print each run's Hydra overrides (no GPU needed; a test does)
#
# Knobs: METHODS, OUT (default outputs/gpu_smoke), PER_RUN_TIMEOUT_S (240), ASSETS (default .assets/gpu).
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PYTHON="${PYTHON:-$ROOT/.venv/bin/python}"
[[ -x "$PYTHON" ]] || PYTHON=python3
OUT="${OUT:-$ROOT/outputs/gpu_smoke}"
ASSETS="${ASSETS:-$ROOT/.assets/gpu}"
METHODS="${METHODS:-grpo dapo ps heapa_grpo heapa_dapo ar3po_grpo ar3po_dapo heapa_ar3po hive_grpo hive_dapo \
reinforce_ada reinforce_ada_dapo heapa_reinforce_ada}"
DRY="${SMOKE_DRY_RUN:-0}"

script_for() {
  case "$1" in
    ar3po_*|heapa_ar3po) echo run_ar3po_qwen.sh ;;
    hive_*) echo run_hive_qwen.sh ;;
    *reinforce_ada*) echo run_reinforce_ada_qwen.sh ;;
    heapa_grpo|heapa_dapo|grpo|dapo|ps) echo "run_${1}_qwen.sh" ;;
    *) echo "gpu_smoke.sh: unknown method '$1'" >&2; return 2 ;;
  esac
}

if [[ "$DRY" != 1 ]]; then
  command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L || { echo "gpu_smoke.sh: no GPU (nvidia-smi)" >&2; exit 2; }
  "$PYTHON" -m verl_ext.cpu.assets --profile gpu --out "$ASSETS" >&2 || exit 1
  mkdir -p "$OUT"
fi

# The launchers' GPU branch with the project's small task: batch 16 x 4, prompt 64 / response 16 tokens, vLLM
# eager (no CUDA-graph capture for a 2-step run) at a small memory share, checkpoint at step 2, no wandb.
export MODEL_PATH="$ASSETS/model" TRAIN_FILE="$ASSETS/data/train.parquet" VAL_FILES="[$ASSETS/data/val.parquet]"
export NNODES=1 NGPUS_PER_NODE=1 TRAIN_BATCH_SIZE=16 MINI_BATCH_SIZE=16 ROLLOUT_N=4 LR=5e-4
export MAX_PROMPT_LENGTH=64 MAX_RESPONSE_LENGTH=16 TOTAL_STEPS=2 SAVE_FREQ=2 TEST_FREQ=2 LOGGERS='[console,file]'
export GPU_MEMORY_UTILIZATION="${GPU_MEMORY_UTILIZATION:-0.3}" HF_HUB_OFFLINE=1 WANDB_MODE=offline PROJECT=gpu-smoke
export MAX_RESTARTS=0  # a smoke run that fails must show its first failure, not a restart
COMMON=(
  actor_rollout_ref.rollout.enforce_eager=True trainer.val_before_train=False trainer.resume_mode=disable
  data.val_max_samples=64 actor_rollout_ref.rollout.val_kwargs.n=4 reward.reward_kwargs.overlong_buffer.len=4
  heapa.teacher.backend=programmatic  # the arithmetic task's exact checker: no teacher server
)
HEAPA=(heapa.augmentation.prompt_preset=tiny heapa.teacher.concurrency=2 heapa.augmentation.max_new_tokens=24
       heapa.augmentation.num_parents=4 heapa.augmentation.band_high=1.0)

rows=()
for m in $METHODS; do
  script="$(script_for "$m")" || exit 2
  args=("${COMMON[@]}")
  [[ "$m" == heapa_* ]] && args+=("${HEAPA[@]}")
  [[ "$m" == *ar3po* ]] && args+=(heapa.ar3po.k1=2 heapa.ar3po.k_s=2)
  if [[ "$DRY" == 1 ]]; then
    echo "### $m"
    METHOD="$m" FORCE_GPU=1 DRY_RUN=1 EXP_NAME="$m" CKPT_DIR="$OUT/$m" bash "scripts/$script" "${args[@]}" || exit 1
    continue
  fi
  echo "[gpu_smoke] $m ..." >&2
  start=$SECONDS
  METHOD="$m" EXP_NAME="$m" CKPT_DIR="$OUT/$m" timeout "${PER_RUN_TIMEOUT_S:-240}" bash "scripts/$script" "${args[@]}" \
    > "$OUT/$m.log" 2>&1
  rc=$?
  rows+=("$m $rc $((SECONDS - start))")
  echo "[gpu_smoke] $m: exit $rc in $((SECONDS - start)) s (log: $OUT/$m.log)" >&2
done
[[ "$DRY" == 1 ]] && exit 0

first="${METHODS%% *}"
echo "[gpu_smoke] evaluating the $first checkpoint with vLLM ..." >&2
start=$SECONDS
"$PYTHON" -m verl_ext.evaluation generate --model "$OUT/$first" --data "$ASSETS/data/val.parquet" --backend vllm \
  --n 4 --limit 64 --max-new-tokens 16 --gpu-memory-utilization 0.3 --out "$OUT/eval" > "$OUT/eval.log" 2>&1
rows+=("eval:$first $? $((SECONDS - start))")

"$PYTHON" - "$OUT" "${rows[@]}" <<'PY' | tee "$OUT/summary.md"
import json, sys
from pathlib import Path

out, rows = Path(sys.argv[1]), [r.split() for r in sys.argv[2:]]
print("| run | exit | wall s | step s (last) | peak GPU mem GB | throughput tok/s | val acc |")
print("|---|---:|---:|---:|---:|---:|---:|")
for name, rc, wall in rows:
    last, acc = {}, ""
    metrics = out / name / "metrics.jsonl"
    if metrics.exists():
        for line in metrics.read_text().splitlines():
            rec = json.loads(line)
            data = rec.get("data", rec)
            last = data if "timing_s/step" in data else last
            acc = next((f"{v:.3f}" for k, v in data.items() if k.startswith("val-core/") and "/acc/" in k), acc)
    elif name.startswith("eval:") and (out / "eval" / "result.json").exists():
        acc = f"{json.loads((out / 'eval' / 'result.json').read_text())['overall']['avg_macro']:.3f}"
    get = lambda k: f"{last[k]:.2f}" if k in last else ""
    print(f"| {name} | {rc} | {wall} | {get('timing_s/step')} | {get('perf/max_memory_allocated_gb')} | "
          f"{get('perf/throughput')} | {acc} |")
PY
for row in "${rows[@]}"; do read -r _ rc _ <<< "$row"; [[ "$rc" == 0 ]] || exit 1; done
