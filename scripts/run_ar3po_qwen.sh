#!/usr/bin/env bash
# AR3PO (docs/ar3po.md): METHOD=ar3po_grpo (default) | ar3po_dapo | heapa_ar3po. GPU: the paper-scale run of the
# other launchers (override MODEL_PATH, TRAIN_FILE, VAL_FILES, NNODES, NGPUS_PER_NODE, PROJECT, EXP_NAME; extra
# Hydra overrides pass through); rollout.n=16 is AR3PO's ceiling: a first stage of 4 responses, and prompts whose
# group is mixed (heapa.ar3po.extend=mixed, the default) filled up to 16. No GPU: the embedded CPU default, the same
# stages up to its rollout.n=8 (the CPU grpo default's n), so a prompt costs 4 or 8.
METHOD="${METHOD:-ar3po_grpo}"
case "$METHOD" in
  ar3po_grpo|ar3po_dapo|heapa_ar3po) ;;
  *) echo "run_ar3po_qwen.sh: METHOD must be ar3po_grpo, ar3po_dapo or heapa_ar3po, got '$METHOD'" >&2; exit 2 ;;
esac
source "$(dirname "${BASH_SOURCE[0]}")/_launch.sh"
