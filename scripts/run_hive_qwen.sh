#!/usr/bin/env bash
# HIVE (docs/hive.md): METHOD=hive_grpo (default) | hive_dapo. GPU: the paper-scale run of the other launchers
# (override MODEL_PATH, TRAIN_FILE, VAL_FILES, NNODES, NGPUS_PER_NODE, PROJECT, EXP_NAME; extra Hydra overrides pass
# through). No GPU: the embedded CPU default. HIVE's knobs: heapa.selection.kwargs.* and heapa.hive.*.
METHOD="${METHOD:-hive_grpo}"
case "$METHOD" in
  hive_grpo|hive_dapo) ;;
  *) echo "run_hive_qwen.sh: METHOD must be hive_grpo or hive_dapo, got '$METHOD'" >&2; exit 2 ;;
esac
source "$(dirname "${BASH_SOURCE[0]}")/_launch.sh"
