#!/usr/bin/env bash
# AR3PO (docs/ar3po.md): METHOD=ar3po_grpo (default) | ar3po_dapo | heapa_ar3po. GPU: the paper-scale run of the
# other launchers (override MODEL_PATH, TRAIN_FILE, VAL_FILES, NNODES, NGPUS_PER_NODE, PROJECT, EXP_NAME; extra
# Hydra overrides pass through); rollout.n=16 is AR3PO's ceiling: a first stage of 4 responses, then more for the
# groups holding both outcomes (extend=mixed), up to 16. No GPU: the embedded CPU default, with ceiling rollout.n=8
# (the CPU grpo default's n): stages of 4, so a prompt costs 4 or 8, the settings measured on the CPU comparison
# (docs/ar3po.md). The paper's rule: heapa.ar3po.extend=unsolved (heapa.ar3po.k1=2 heapa.ar3po.k_s=2 for stages of 2).
METHOD="${METHOD:-ar3po_grpo}"
case "$METHOD" in
  ar3po_grpo|ar3po_dapo|heapa_ar3po) ;;
  *) echo "run_ar3po_qwen.sh: METHOD must be ar3po_grpo, ar3po_dapo or heapa_ar3po, got '$METHOD'" >&2; exit 2 ;;
esac
source "$(dirname "${BASH_SOURCE[0]}")/_launch.sh"
