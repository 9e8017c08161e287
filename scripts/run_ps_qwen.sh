#!/usr/bin/env bash
# ps: see README "Methods". GPU: paper-scale run (override MODEL_PATH, TRAIN_FILE, VAL_FILES, NNODES,
# NGPUS_PER_NODE, PROJECT, EXP_NAME; extra Hydra overrides pass through). No GPU: the embedded CPU default.
METHOD=ps
source "$(dirname "${BASH_SOURCE[0]}")/_launch.sh"
