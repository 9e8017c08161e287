#!/usr/bin/env bash
# Reinforce-Ada (docs/methods.md): METHOD=reinforce_ada (default) | reinforce_ada_dapo | heapa_reinforce_ada. GPU:
# the paper-scale run of the other launchers (override MODEL_PATH, TRAIN_FILE, VAL_FILES, NNODES, NGPUS_PER_NODE,
# PROJECT, EXP_NAME; extra Hydra overrides pass through) with GRPO's rollout.n as the kept group, so "Reinforce-Ada
# vs GRPO at the same n" is this launcher against run_grpo_qwen.sh (the paper kept n=4: actor_rollout_ref.rollout.n=4).
# No GPU: the embedded CPU default. Its knobs: heapa.reinforce_ada.{exit,round_size,max_per_prompt,global_baseline}.
METHOD="${METHOD:-reinforce_ada}"
case "$METHOD" in
  reinforce_ada|reinforce_ada_dapo|heapa_reinforce_ada) ;;
  *) echo "run_reinforce_ada_qwen.sh: METHOD must be reinforce_ada, reinforce_ada_dapo or heapa_reinforce_ada," \
          "got '$METHOD'" >&2; exit 2 ;;
esac
source "$(dirname "${BASH_SOURCE[0]}")/_launch.sh"
