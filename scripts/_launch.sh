#!/usr/bin/env bash
# Shared launcher for the run_*_qwen.sh scripts (sourced; METHOD is set by the caller).
#
# With a GPU: paper-scale settings (HeaPA §7), every one overridable by environment variable, and any extra
# Hydra overrides passed through ("$@"). Without a GPU: the embedded default — the tiny offline assets (profile
# `learn`, docs/cpu_learning.md) on the CPU backend for 40 steps, ~8 min on 2 cores — so a newcomer sees the
# recipe, the pool metrics and validation accuracy move on a laptop (GRPO: +10 points or more by step 20-40).
# FORCE_CPU=1 / FORCE_GPU=1 skip the detection; DRY_RUN=1 prints the trainer's Hydra overrides, one per line.
# A leading ~/ in the path variables (also inside a quoted list: VAL_FILES='[~/a.parquet,~/b.parquet]') is
# expanded here: Hydra's override grammar rejects an unquoted ~ and verl would not expand it.
# Every attempt of a run keeps its metrics: a resumed run moves the previous metrics.jsonl aside to
# metrics.attempt-<k>.jsonl (see docs/run_files.md).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
if [[ -z "${PYTHON:-}" ]]; then
  if [[ -x "$ROOT/.venv/bin/python" ]]; then PYTHON="$ROOT/.venv/bin/python"; else PYTHON=python3; fi
fi
expand_home() {  # ~/x at the start, after '[' or after ',' -> $HOME/x
  local sep='#'
  [[ "$HOME" == *"#"* ]] && sep='|'
  printf '%s' "$1" | sed -E "s${sep}(^|[[,])~/${sep}\1${HOME}/${sep}g"
}
absolute() { if [[ "$1" == /* ]]; then printf '%s' "$1"; else printf '%s' "$ROOT/$1"; fi; }
# The trainer runs under recipe.heapa.ops.supervise (MAX_RESTARTS, default 2; RESTART_BACKOFF_S, 30): a crash after a
# new checkpoint restarts it from there. It watches the checkpoint folder the run really uses (the last
# trainer.default_local_dir override wins).
ckpt_dir() {
  local dir="$1" a
  for a in "${ARGS[@]}"; do [[ "$a" == trainer.default_local_dir=* ]] && dir="${a#trainer.default_local_dir=}"; done
  absolute "$dir"
}
PROJECT="${PROJECT:-verl-heapa}"
EXP_NAME="${EXP_NAME:-${METHOD}}"

have_gpu() {
  [[ "${FORCE_GPU:-0}" == "1" ]] && return 0
  [[ "${FORCE_CPU:-0}" == "1" ]] && return 1
  command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi >/dev/null 2>&1
}

if ! have_gpu; then
  ASSETS_PROFILE="${ASSETS_PROFILE:-learn}"  # verl_ext.cpu.assets profile: learn (this default) or tiny (tests)
  CPU_LOGGERS="${LOGGERS:-[console,file,wandb]}"
  ASSETS="$(expand_home "${VERL_EXT_ASSETS:-$ROOT/.assets/$ASSETS_PROFILE}")"
  OUT="$(absolute "$(expand_home "${OUT_DIR:-$ROOT/outputs/$EXP_NAME}")")"
  ARGS=(
    method="$METHOD" platform=cpu
    data.train_files="$ASSETS/data/train.parquet" data.val_files="$ASSETS/data/val.parquet"
    data.train_max_samples="${TRAIN_MAX_SAMPLES:--1}" data.val_max_samples="${VAL_MAX_SAMPLES:-512}"
    data.train_batch_size=16 data.max_prompt_length=64 data.max_response_length=16
    actor_rollout_ref.model.path="$ASSETS/model"
    actor_rollout_ref.actor.optim.lr=5e-4
    # no LR warm-up for any method (the DAPO presets' 10 steps are a quarter of this run): every method learns on
    # GRPO's schedule, so the CPU comparison stays comparable and reproducible (docs/presets.md)
    actor_rollout_ref.actor.optim.lr_warmup_steps=-1
    actor_rollout_ref.actor.ppo_mini_batch_size=16 actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=32
    actor_rollout_ref.rollout.n=8 actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=32
    actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=32
    # validation: greedy (T=0) accuracy on the held-out problems, the headline that decides comparisons (no
    # sampling noise; a sampled avg@1 carried 1.5-1.9 points). VAL_TEMPERATURE=1 VAL_K=4 gives avg@k at the training
    # temperature instead, sampled with common random numbers: same seed, same model -> same samples (hf_server.py)
    actor_rollout_ref.rollout.val_kwargs.n="${VAL_K:-1}"
    actor_rollout_ref.rollout.val_kwargs.temperature="${VAL_TEMPERATURE:-0}"
    actor_rollout_ref.rollout.val_kwargs.do_sample="$(awk -v t="${VAL_TEMPERATURE:-0}" 'BEGIN{print (t + 0 > 0) ? "True" : "False"}')"
    reward.reward_kwargs.overlong_buffer.len=4
    # wandb offline into $OUT/wandb (WANDB_DIR below): `python -m verl_ext.compare $OUT/wandb` reads it, `wandb sync`
    # uploads it
    "trainer.logger=$CPU_LOGGERS" trainer.project_name="$PROJECT" trainer.experiment_name="$EXP_NAME"
    trainer.total_training_steps="${STEPS:-40}" trainer.save_freq=20 trainer.test_freq="${TEST_FREQ:-10}"
    trainer.val_before_train=True trainer.default_local_dir="$OUT/ckpt" trainer.resume_mode="${RESUME_MODE:-auto}"
    heapa.teacher.backend=programmatic  # the arithmetic task's exact checker; no teacher server needed
    heapa.rows.duplicates=allow  # small-number arithmetic repeats prompts by construction: each copy is a record
  )
  if [[ "$METHOD" == heapa_* ]]; then  # the tiny model writes variants in its warm-start format; checked exactly
    ARGS+=(heapa.augmentation.prompt_preset=tiny heapa.teacher.concurrency=2
           heapa.augmentation.max_new_tokens=24 heapa.augmentation.num_parents=4 heapa.augmentation.band_high=1.0
           # the arithmetic rows carry their level: what cold_draw=signal groups never-measured problems by
           ++heapa.selection.kwargs.cold_group_key=extra_info.level)
  fi
  ARGS+=("$@")
  if [[ "${DRY_RUN:-0}" == "1" ]]; then printf '%s\n' "${ARGS[@]}"; exit 0; fi
  echo "[verl-heapa] no GPU found: running the embedded default (tiny Qwen2-architecture model, arithmetic task," \
       "CPU backend, ${STEPS:-40} steps) for method=$METHOD. Set MODEL_PATH/TRAIN_FILE on a GPU machine." >&2
  "$PYTHON" -m verl_ext.cpu.assets --profile "$ASSETS_PROFILE" --out "$ASSETS" >&2
  mkdir -p "$OUT"
  # VERL_PLATFORM from the start: the driver's first platform lookup then finds the CPU (no fallback warnings)
  export WANDB_MODE="${WANDB_MODE:-offline}" WANDB_DIR="${WANDB_DIR:-$OUT}" WANDB_SILENT="${WANDB_SILENT:-true}" \
         HF_HUB_OFFLINE=1 VERL_PLATFORM=cpu VERL_FILE_LOGGER_PATH="${VERL_FILE_LOGGER_PATH:-$OUT/metrics.jsonl}"
  [[ "$CPU_LOGGERS" != *wandb* ]] ||
    echo "[verl-heapa] metrics also go to wandb ($WANDB_MODE) under $WANDB_DIR/wandb; verl_ext.compare reads it" >&2
  # --foreground: a SIGTERM to this script (a scheduler's stop) or the time limit reaches the supervisor alone, which
  # passes it to the trainer (checkpoint, exit 75, Ray shut down). Without it `timeout` signals its whole process
  # group, Ray's workers included, and the trainer fails mid-step instead of checkpointing.
  exec timeout --foreground "${TIMEOUT_S:-1800}" "$PYTHON" -m recipe.heapa.ops.supervise --ckpt-dir "$(ckpt_dir "$OUT/ckpt")" -- \
    "$PYTHON" -m recipe.heapa.main_heapa "${ARGS[@]}"
fi

MODEL_PATH="$(expand_home "${MODEL_PATH:-Qwen/Qwen3-4B-Instruct-2507}")"
TRAIN_FILE="$(expand_home "${TRAIN_FILE:-$HOME/data/dapo-math-17k/train.parquet}")"
VAL_FILES="$(expand_home "${VAL_FILES:-[$HOME/data/eval/aime24.parquet,$HOME/data/eval/aime25.parquet,$HOME/data/eval/math500.parquet]}")"
CKPT_DIR="$(absolute "$(expand_home "${CKPT_DIR:-checkpoints/$PROJECT/$EXP_NAME}")")"
NNODES="${NNODES:-1}"
NGPUS_PER_NODE="${NGPUS_PER_NODE:-8}"
MAX_PROMPT_LENGTH="${MAX_PROMPT_LENGTH:-2048}"
MAX_RESPONSE_LENGTH="${MAX_RESPONSE_LENGTH:-20480}"
# Attention of the actor/reference models: verl's default, flash_attention_2, needs the flash-attn package, which
# neither verl's vllm extra nor ours installs (no binary wheel on PyPI). ATTN_IMPL=auto (default) uses it when it
# imports and PyTorch's sdpa otherwise. Both run packed (remove-padding): verl passes a packed batch with
# attention_mask=None and per-sequence position ids, from which transformers builds sdpa's block-diagonal mask;
# padded rows would pad a 24k-token micro-batch to rows x its longest row (docs/gpu_memory.md). eager: padded.
ATTN_IMPL="${ATTN_IMPL:-auto}"
if [[ "$ATTN_IMPL" == auto ]]; then
  if "$PYTHON" -c 'import flash_attn' >/dev/null 2>&1; then ATTN_IMPL=flash_attention_2; else
    ATTN_IMPL=sdpa
    echo "[verl-heapa] flash-attn is not installed: using sdpa attention on packed sequences (remove-padding; slower" \
         "than flash attention on long responses; FLASH_ATTN=1 bash scripts/setup_env.sh builds flash-attn, then" \
         "ATTN_IMPL=auto picks it)" >&2
  fi
fi
case "$ATTN_IMPL" in flash_attention_2|flash_attention_3|sdpa) REMOVE_PADDING=True ;; *) REMOVE_PADDING=False ;; esac
ARGS=(
  method="$METHOD" platform=gpu
  data.train_files="$TRAIN_FILE" data.val_files="$VAL_FILES"
  data.train_batch_size="${TRAIN_BATCH_SIZE:-512}" data.max_prompt_length="$MAX_PROMPT_LENGTH"
  data.max_response_length="$MAX_RESPONSE_LENGTH" data.filter_overlong_prompts=True
  actor_rollout_ref.model.path="$MODEL_PATH" actor_rollout_ref.model.use_remove_padding="$REMOVE_PADDING"
  ++actor_rollout_ref.model.override_config.attn_implementation="$ATTN_IMPL"
  actor_rollout_ref.model.enable_gradient_checkpointing=True
  actor_rollout_ref.actor.optim.lr="${LR:-1e-6}" actor_rollout_ref.actor.ppo_mini_batch_size="${MINI_BATCH_SIZE:-32}"
  actor_rollout_ref.actor.use_dynamic_bsz=True actor_rollout_ref.actor.ppo_max_token_len_per_gpu=24576
  actor_rollout_ref.rollout.name=vllm actor_rollout_ref.rollout.n="${ROLLOUT_N:-16}"
  actor_rollout_ref.rollout.tensor_model_parallel_size="${ROLLOUT_TP:-1}"
  actor_rollout_ref.rollout.gpu_memory_utilization="${GPU_MEMORY_UTILIZATION:-0.8}"
  # vLLM's KV cache sized for one rollout (prompt + response), not the model's full context (262k for Qwen3-4B)
  actor_rollout_ref.rollout.max_model_len="$((MAX_PROMPT_LENGTH + MAX_RESPONSE_LENGTH))"
  actor_rollout_ref.rollout.val_kwargs.n=16 actor_rollout_ref.rollout.val_kwargs.temperature=0.7
  actor_rollout_ref.rollout.val_kwargs.top_p=0.7 actor_rollout_ref.rollout.val_kwargs.do_sample=True
  "trainer.logger=${LOGGERS:-[console,wandb,file]}" trainer.project_name="$PROJECT" trainer.experiment_name="$EXP_NAME"
  trainer.nnodes="$NNODES" trainer.n_gpus_per_node="$NGPUS_PER_NODE"
  trainer.total_training_steps="${TOTAL_STEPS:-500}" trainer.save_freq="${SAVE_FREQ:-50}"
  trainer.test_freq="${TEST_FREQ:-25}" trainer.default_local_dir="$CKPT_DIR"
)
# Methods without augmentation never call a teacher: do not require TEACHER_MODEL for them. With augmentation, a
# teacher reply is bounded (a runaway reply would otherwise run to timeout_s, retried): TEACHER_MAX_TOKENS (1024;
# empty = not sent, for reasoning APIs that take extra_body={max_completion_tokens:...} instead).
if [[ "$METHOD" == heapa_* ]]; then
  [[ -n "${TEACHER_MAX_TOKENS-1024}" ]] && ARGS+=(heapa.teacher.max_tokens="${TEACHER_MAX_TOKENS-1024}")
else
  ARGS+=(heapa.teacher.backend=programmatic)
fi
ARGS+=("$@")
# wandb: online when this node has a key (WANDB_API_KEY, or a ~/.netrc entry for api.wandb.ai, written by `wandb
# login`), offline otherwise: without a key wandb.init stops the run at start. An explicit WANDB_MODE wins.
GPU_LOGGERS="${LOGGERS:-[console,wandb,file]}"
if [[ "$GPU_LOGGERS" == *wandb* ]]; then
  export WANDB_DIR="${WANDB_DIR:-$CKPT_DIR}"
  if [[ -z "${WANDB_MODE:-}" ]]; then
    if [[ -n "${WANDB_API_KEY:-}" ]] || grep -qs 'api\.wandb\.ai' "${NETRC:-$HOME/.netrc}"; then export WANDB_MODE=online
    else
      export WANDB_MODE=offline
      echo "[verl-heapa] wandb: no API key here (WANDB_API_KEY or ~/.netrc): logging offline to $WANDB_DIR/wandb;" \
           "\`wandb sync $WANDB_DIR/wandb/offline-run-*\` uploads it later" >&2
    fi
  fi
  echo "[verl-heapa] WANDB_MODE=$WANDB_MODE" >&2
fi
# the largest micro-batch's memory by phase (verl_ext/gpu_plan), when the model's config.json is on this machine
model_config() {
  local path="$MODEL_PATH" a hub
  for a in "${ARGS[@]}"; do [[ "$a" == actor_rollout_ref.model.path=* ]] && path="${a#actor_rollout_ref.model.path=}"; done
  [[ -f "$path/config.json" ]] && { printf '%s' "$path/config.json"; return 0; }
  hub="${HF_HUB_CACHE:-${HF_HOME:-$HOME/.cache/huggingface}/hub}/models--${path//\//--}/snapshots"
  [[ "$path" != /* && -d "$hub" ]] && compgen -G "$hub/*/config.json" >/dev/null && { ls -t "$hub"/*/config.json | head -n1; return 0; }
  return 1
}
if [[ "${DRY_RUN:-0}" == "1" ]]; then
  printf '%s\n' "${ARGS[@]}"
  if [[ "${GPU_PLAN:-1}" == 1 ]]; then
    if cfg_json="$(model_config)"; then
      printf '%s\n' "${ARGS[@]}" | "$PYTHON" -m verl_ext.gpu_plan --model-config "$cfg_json" \
        --gpu-gb "${GPU_GB:-80}" >&2 || echo "[verl-heapa] the GPU memory estimate failed (see above)" >&2
    else
      echo "[verl-heapa] GPU memory estimate: no config.json for $MODEL_PATH on this machine; run" \
           "\`FORCE_GPU=1 DRY_RUN=1 bash $0 | python -m verl_ext.gpu_plan --model-config <config.json|qwen3-4b> --gpu-gb 80 40\`" >&2
    fi
  fi
  exit 0
fi
export VERL_FILE_LOGGER_PATH="${VERL_FILE_LOGGER_PATH:-$CKPT_DIR/metrics.jsonl}"
exec "$PYTHON" -m recipe.heapa.ops.supervise --ckpt-dir "$(ckpt_dir "$CKPT_DIR")" -- \
  "$PYTHON" -m recipe.heapa.main_heapa "${ARGS[@]}"
