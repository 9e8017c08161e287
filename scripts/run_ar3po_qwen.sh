#!/usr/bin/env bash
# AR3PO (docs/ar3po.md): METHOD=ar3po_grpo (default) | ar3po_dapo | heapa_ar3po. GPU: the paper-scale run of the
# other launchers (override MODEL_PATH, TRAIN_FILE, VAL_FILES, NNODES, NGPUS_PER_NODE, PROJECT, EXP_NAME; extra
# Hydra overrides pass through); rollout.n=16 is AR3PO's ceiling: a first stage of 4 responses, then more for the
# prompts the stage rule picks, up to 16 (ar3po_grpo/ar3po_dapo: groups holding both outcomes, extend=mixed;
# heapa_ar3po: prompts not yet solved, the paper's extend=unsolved). No GPU: the embedded CPU default, with ceiling
# rollout.n=8 (the CPU grpo default's n): stages of 4 for the mixed rule (a prompt costs 4 or 8), stages of 2 for
# heapa_ar3po (2, 4, 6 or 8), the settings measured on the CPU comparison (docs/ar3po.md).
METHOD="${METHOD:-ar3po_grpo}"
case "$METHOD" in
  ar3po_grpo|ar3po_dapo|heapa_ar3po) ;;
  *) echo "run_ar3po_qwen.sh: METHOD must be ar3po_grpo, ar3po_dapo or heapa_ar3po, got '$METHOD'" >&2; exit 2 ;;
esac
if [[ "$METHOD" == heapa_ar3po && "${FORCE_GPU:-0}" != "1" ]] && { [[ "${FORCE_CPU:-0}" == "1" ]] || \
     ! { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi >/dev/null 2>&1; }; }; then
  set -- heapa.ar3po.k1=2 heapa.ar3po.k_s=2 "$@"  # the same detection as _launch.sh; user overrides still win
fi
source "$(dirname "${BASH_SOURCE[0]}")/_launch.sh"
