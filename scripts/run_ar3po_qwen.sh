#!/usr/bin/env bash
# AR3PO (docs/ar3po.md): METHOD=ar3po_grpo (default) | ar3po_dapo | heapa_ar3po. GPU: the paper-scale run of the
# other launchers (override MODEL_PATH, TRAIN_FILE, VAL_FILES, NNODES, NGPUS_PER_NODE, PROJECT, EXP_NAME; extra
# Hydra overrides pass through); rollout.n=16 is AR3PO's ceiling: stages of 4 responses, up to 16 per prompt.
# No GPU: the embedded CPU default, with stages of 2 up to its rollout.n=8 (the CPU grpo default's n).
METHOD="${METHOD:-ar3po_grpo}"
case "$METHOD" in
  ar3po_grpo|ar3po_dapo|heapa_ar3po) ;;
  *) echo "run_ar3po_qwen.sh: METHOD must be ar3po_grpo, ar3po_dapo or heapa_ar3po, got '$METHOD'" >&2; exit 2 ;;
esac
if [[ "${FORCE_GPU:-0}" != "1" ]] && { [[ "${FORCE_CPU:-0}" == "1" ]] || \
     ! { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi >/dev/null 2>&1; }; }; then
  set -- heapa.ar3po.k1=2 heapa.ar3po.k_s=2 "$@"  # the same detection as _launch.sh; user overrides still win
fi
source "$(dirname "${BASH_SOURCE[0]}")/_launch.sh"
