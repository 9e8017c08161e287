#!/usr/bin/env bash
# Regenerate tests/golden/ (this CPU's pinned heapa_grpo trace and the checkpoint state files) from a COMMITTED
# state of the code, never from a working tree someone is editing: `bash scripts/update_golden.sh [COMMIT]`
# (default HEAD).
#
# It clones this repository at COMMIT into $WORKDIR (default a fresh temp folder), makes that clone's venv
# (scripts/setup_env.sh), reuses this checkout's tiny assets (.assets, or $VERL_EXT_ASSETS), takes this checkout's
# tests/e2e/test_pinned_run.py (so the golden format is today's), runs its golden tests with
# VERL_EXT_UPDATE_GOLDEN=1 under the e2e lock (one Ray training at a time on this machine), and copies
# tests/golden/ back here. Commit the result only for an intended behaviour change, and say which in the commit
# message (tests/e2e/test_pinned_run.py).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
COMMIT="$(git -C "$REPO" rev-parse "${1:-HEAD}")"
WORKDIR="${WORKDIR:-$(mktemp -d /tmp/verl_ext_golden.XXXXXX)}"
LOCK="${VERL_EXT_E2E_LOCK:-/tmp/verl_ext_e2e.lock}"

echo "[update_golden] $COMMIT in $WORKDIR" >&2
[[ -d "$WORKDIR/.git" ]] || git clone -q "$REPO" "$WORKDIR"
git -C "$WORKDIR" checkout -q "$COMMIT"
bash "$WORKDIR/scripts/setup_env.sh"
if [[ -z "${VERL_EXT_ASSETS:-}" && -d "$REPO/.assets" && ! -d "$WORKDIR/.assets" ]]; then
  cp -r "$REPO/.assets" "$WORKDIR/.assets"
fi
cp "$REPO/tests/e2e/test_pinned_run.py" "$WORKDIR/tests/e2e/test_pinned_run.py"
(cd "$WORKDIR" && VERL_EXT_UPDATE_GOLDEN=1 flock "$LOCK" .venv/bin/python -m pytest -q -rs -p no:cacheprovider \
   tests/e2e/test_pinned_run.py -k golden)
rm -rf "$REPO/tests/golden"
cp -r "$WORKDIR/tests/golden" "$REPO/tests/golden"
# one trace per CPU kind's tiny build: the others were not rerun here, and are stale after a behaviour change
for trace in "$REPO"/tests/golden/heapa_grpo_trace*.json; do
  name="tests/golden/$(basename "$trace")"
  if git -C "$REPO" show "$COMMIT:$name" 2>/dev/null | cmp -s - "$trace"; then
    echo "[update_golden] $name is unchanged (another CPU's build, or no change): delete it if behaviour changed" >&2
  fi
done
echo "[update_golden] wrote $REPO/tests/golden from $COMMIT; review 'git diff --stat tests/golden' before committing" >&2
