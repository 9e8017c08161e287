#!/usr/bin/env bash
# Device smoke test for a lent GPU machine (no network; Python 3.12 with torch + transformers; docs/device_smoke.md).
# Unpacks the carry bundle (scripts/device_smoke/build_bundle.py) into a temp dir, puts its site tree on PYTHONPATH,
# checks the device's own packages, `import verl` and `ray.init`, then runs 2 steps each of heapa_dapo, hive_grpo and
# heapa_ar3po (FSDP on CUDA, sdpa on packed rows, NCCL, bf16; the project's hf rollout, whose HFServer runs the
# model on the host CPU), a checkpoint of the first, `python -m verl_ext.evaluation generate --backend hf` of it on
# CUDA, and the packed-vs-padded sdpa check at Qwen3-4B width. Writes $OUT/summary.md. Budget: 8 minutes.
#
#   bash scripts/device_smoke/run_on_device.sh [BUNDLE]      # default .device_bundle/carry/bundle.tar.xz
#   DEVICE_DRY_RUN=1 bash scripts/device_smoke/run_on_device.sh   # on a CPU machine: see below
#
# Dry mode (DEVICE_DRY_RUN=1): unpacks the bundle, runs the import checks and ray.init (with the bundle's site tree
# when the interpreter matches the bundle's Python, else with the interpreter's own packages, and says so), composes
# each trainer run's exact overrides with Hydra (`--cfg job`, nothing trains), evaluates the bundled model on CPU
# with the hf backend and runs the sdpa check at tiny width on CPU.
# Knobs: OUT ($OUT or outputs/device_smoke), DEVICE_PYTHON, METHODS, PER_RUN_TIMEOUT_S (100), BUDGET_S (480),
# SDPA_ROWS (8192,1024,1024), KEEP_WORK=1 (keep the unpacked dir).
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
BUNDLE="${1:-$ROOT/.device_bundle/carry/bundle.tar.xz}"
DRY="${DEVICE_DRY_RUN:-0}"
OUT="${OUT:-$ROOT/outputs/device_smoke}"
METHODS="${METHODS:-heapa_dapo hive_grpo heapa_ar3po}"
BUDGET_S="${BUDGET_S:-480}"
PER_RUN_TIMEOUT_S="${PER_RUN_TIMEOUT_S:-100}"
mkdir -p "$OUT"
START=$SECONDS
rows=()
row() { rows+=("$1|$2|$3|$4"); echo "[device_smoke] $1: exit $2 in $3 s ${4:+($4)}" >&2; }
left() { echo $((BUDGET_S - (SECONDS - START))); }

if [[ "$DRY" == 1 ]]; then
  PY="${DEVICE_PYTHON:-$ROOT/.venv/bin/python}"; [[ -x "$PY" ]] || PY=python3
else
  PY="${DEVICE_PYTHON:-$(command -v python3.12 || command -v python3)}"
fi

# 1. unpack
[[ -f "$BUNDLE" ]] || { echo "run_on_device.sh: no bundle at $BUNDLE (build it: python scripts/device_smoke/build_bundle.py)" >&2; exit 2; }
WORK="$(mktemp -d "${TMPDIR:-/tmp}/device_smoke.XXXXXX")"
[[ "${KEEP_WORK:-0}" == 1 ]] || trap 'rm -rf "$WORK"' EXIT
t=$SECONDS
tar -xJf "$BUNDLE" -C "$WORK"; rc=$?
row unpack "$rc" $((SECONDS - t)) "$(du -sm "$WORK" | cut -f1) MiB unpacked"
[[ $rc == 0 ]] || exit 1
SITE="$WORK/site" ASSETS="$WORK/assets"
# The project is not pip-installed there: verl finds its plugin (verl_ext.plugin) through this entry point.
mkdir -p "$SITE/verl_heapa-0.1.0.dist-info"
printf 'Metadata-Version: 2.1\nName: verl-heapa\nVersion: 0.1.0\n' > "$SITE/verl_heapa-0.1.0.dist-info/METADATA"
printf '[verl.plugins]\nheapa = verl_ext.plugin\n' > "$SITE/verl_heapa-0.1.0.dist-info/entry_points.txt"

want="$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["python_version"])' "$WORK/bundle.json")"
have="$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
if [[ "$want" == "$have" ]]; then
  export PYTHONPATH="$SITE:$ROOT${PYTHONPATH:+:$PYTHONPATH}"; SITE_NOTE="bundle site tree (Python $want)"
else  # dry run on another Python: the bundle's compiled modules cannot load; the interpreter's own packages stand in
  [[ "$DRY" == 1 ]] || { echo "run_on_device.sh: bundle is for Python $want, $PY is $have" >&2; exit 2; }
  export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"; SITE_NOTE="interpreter's own packages (bundle is for $want, $PY is $have)"
fi
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 WANDB_MODE=offline TOKENIZERS_PARALLELISM=false RAY_USAGE_STATS_ENABLED=0
echo "[device_smoke] python $PY ($have), imports from: $SITE_NOTE" >&2

# 2. the device's own packages, then verl and Ray
t=$SECONDS
"$PY" - "$WORK/bundle.json" > "$OUT/versions.txt" 2>&1 <<'PY'
import importlib, json, sys
names = json.load(open(sys.argv[1]))["device_provided"]
missing = []
for name in names:
    try:
        mod = importlib.import_module(name)
        print(f"{name} {getattr(mod, '__version__', '?')}")
    except Exception as exc:  # report every missing one, not just the first
        missing.append(f"{name}: {exc!r}")
import torch
print(f"cuda available {torch.cuda.is_available()} devices {torch.cuda.device_count()}")
sys.exit(f"missing on this machine: {missing}" if missing else 0)
PY
rc=$?; row device_packages "$rc" $((SECONDS - t)) "$(tr '\n' ' ' < "$OUT/versions.txt" | cut -c1-160)"
t=$SECONDS
timeout 180 "$PY" -c '
import ray, verl, recipe.heapa.main_heapa, verl_ext.cpu.hf_rollout
ray.init(num_cpus=2, include_dashboard=False)
assert ray.get(ray.remote(lambda: 41 + 1).remote()) == 42
ray.shutdown()
print("ray", ray.__version__, "verl", verl.__version__)' > "$OUT/imports.log" 2>&1
rc=$?; row import_verl_ray_init "$rc" $((SECONDS - t)) "$(tail -1 "$OUT/imports.log" | cut -c1-120)"
[[ $rc == 0 ]] || { tail -30 "$OUT/imports.log" >&2; }

# 3. two steps per method on one GPU: FSDP (bf16 params by verl's default), sdpa on packed rows, hf rollout
overrides() {  # $1 method, $2 save_freq
  local m="$1" a=(
    method="$m" platform=gpu
    data.train_files="$ASSETS/data/train.parquet" data.val_files="$ASSETS/data/val.parquet"
    data.train_batch_size=16 data.val_max_samples=64 data.max_prompt_length=64 data.max_response_length=16
    data.dataloader_num_workers=0
    actor_rollout_ref.model.path="$ASSETS/model" actor_rollout_ref.model.use_remove_padding=True
    ++actor_rollout_ref.model.override_config.attn_implementation=sdpa
    actor_rollout_ref.actor.optim.lr=5e-4 actor_rollout_ref.actor.optim.lr_warmup_steps=-1
    actor_rollout_ref.actor.ppo_mini_batch_size=16 actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=32
    actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=32 actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=32
    actor_rollout_ref.rollout.name=hf actor_rollout_ref.rollout.n=4 actor_rollout_ref.rollout.tensor_model_parallel_size=1
    actor_rollout_ref.rollout.checkpoint_engine.backend=naive actor_rollout_ref.rollout.calculate_log_probs=True
    actor_rollout_ref.rollout.agent.num_workers=1 actor_rollout_ref.rollout.val_kwargs.n=1
    ++actor_rollout_ref.rollout.engine_kwargs.hf.num_threads=8
    reward.num_workers=1 reward.reward_kwargs.overlong_buffer.len=4
    trainer.device=cuda trainer.nnodes=1 trainer.n_gpus_per_node=1 "trainer.logger=[console,file]"
    trainer.project_name=device-smoke trainer.experiment_name="$m" trainer.total_training_steps=2
    trainer.save_freq="$2" trainer.test_freq=2 trainer.val_before_train=False trainer.resume_mode=disable
    trainer.default_local_dir="$OUT/$m"
    heapa.teacher.backend=programmatic heapa.rows.duplicates=allow
  )
  [[ "$m" == heapa_* ]] && a+=(heapa.augmentation.prompt_preset=tiny heapa.teacher.concurrency=2
    heapa.augmentation.max_new_tokens=24 heapa.augmentation.num_parents=4 heapa.augmentation.band_high=1.0)
  [[ "$m" == *ar3po* ]] && a+=(heapa.ar3po.k1=2 heapa.ar3po.k_s=2)
  printf '%s\n' "${a[@]}"
}
first="${METHODS%% *}"
for m in $METHODS; do
  mapfile -t args < <(overrides "$m" "$([[ $m == "$first" ]] && echo 2 || echo -1)")
  printf '%s\n' "${args[@]}" > "$OUT/$m.overrides"
  t=$SECONDS
  if [[ "$DRY" == 1 ]]; then  # compose the exact device config (Hydra checks every key); nothing trains
    timeout 180 "$PY" -m recipe.heapa.main_heapa --cfg job "${args[@]}" > "$OUT/$m.log" 2>&1
    rc=$?; row "$m" "$rc" $((SECONDS - t)) "composed only (dry run)"
    continue
  fi
  budget=$(( $(left) < PER_RUN_TIMEOUT_S ? $(left) : PER_RUN_TIMEOUT_S ))
  (( budget > 20 )) || { row "$m" skipped 0 "out of budget"; continue; }
  mkdir -p "$OUT/$m"
  VERL_FILE_LOGGER_PATH="$OUT/$m/metrics.jsonl" timeout "$budget" "$PY" -m recipe.heapa.main_heapa "${args[@]}" \
    > "$OUT/$m.log" 2>&1
  rc=$?; row "$m" "$rc" $((SECONDS - t)) "log $m.log"
done

# 4. evaluation of the checkpoint (dry: the bundled model on CPU)
t=$SECONDS
if [[ "$DRY" == 1 ]]; then
  eval_args=(--model "$ASSETS/model" --device cpu --n 2 --limit 8)
else
  eval_args=(--model "$OUT/$first" --device cuda --n 4 --limit 64)
fi
budget=$(( $(left) > 30 ? $(left) : 30 ))
timeout "$budget" "$PY" -m verl_ext.evaluation generate "${eval_args[@]}" --data "$ASSETS/data/val.parquet" \
  --backend hf --max-new-tokens 16 --out "$OUT/eval" > "$OUT/eval.log" 2>&1
rc=$?; row "eval:${eval_args[1]##*/}" "$rc" $((SECONDS - t)) "log eval.log"

# 5. packed vs padded sdpa at Qwen3-4B width (dry: tiny width on CPU)
t=$SECONDS
if [[ "$DRY" == 1 ]]; then sdpa=(--tiny --device cpu --rows 256,64,32); else sdpa=(--device cuda --rows "${SDPA_ROWS:-8192,1024,1024}"); fi
timeout 180 "$PY" "$ROOT/scripts/device_smoke/sdpa_check.py" "${sdpa[@]}" --out "$OUT/sdpa.json" > "$OUT/sdpa.log" 2>&1
rc=$?; row sdpa_packed_vs_padded "$rc" $((SECONDS - t)) "$(tail -1 "$OUT/sdpa.log" | cut -c1-200)"

# 6. summary
"$PY" - "$OUT" "$DRY" "$SITE_NOTE" $((SECONDS - START)) "${rows[@]}" > "$OUT/summary.md" <<'PY'
import json, sys
from pathlib import Path

out, dry, site_note, total, rows = Path(sys.argv[1]), sys.argv[2] == "1", sys.argv[3], sys.argv[4], sys.argv[5:]
print(f"# device smoke{' (DRY RUN: no GPU, nothing trained)' if dry else ''}\n\nimports from: {site_note}; total {total} s\n")
print("| check | exit | wall s | step s (last) | peak GPU mem GB | throughput tok/s | val acc | note |")
print("|---|---:|---:|---:|---:|---:|---:|---|")
for r in rows:
    name, rc, wall, note = r.split("|", 3)
    last, acc = {}, ""
    metrics = out / name / "metrics.jsonl"
    if metrics.exists():
        for line in metrics.read_text().splitlines():
            data = json.loads(line)
            data = data.get("data", data)
            last = data if "timing_s/step" in data else last
            acc = next((f"{v:.3f}" for k, v in data.items() if k.startswith("val-core/") and "/acc/" in k), acc)
    elif name.startswith("eval:") and (out / "eval" / "result.json").exists():
        acc = f"{json.loads((out / 'eval' / 'result.json').read_text())['overall']['avg_macro']:.3f}"
    get = lambda k: f"{last[k]:.2f}" if k in last else ""
    note = note.replace("|", "/")
    print(f"| {name} | {rc} | {wall} | {get('timing_s/step')} | {get('perf/max_memory_allocated_gb')} | "
          f"{get('perf/throughput')} | {acc} | {note} |")
PY
cat "$OUT/summary.md"
for r in "${rows[@]}"; do IFS='|' read -r _ rc _ _ <<< "$r"; [[ "$rc" == 0 ]] || exit 1; done
exit 0
