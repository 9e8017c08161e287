"""One short ``heapa_grpo`` run (``pinned_run``) and what is checked on it: it is pinned across commits, a damaged
latest checkpoint of it falls back to the previous one, and the restarted command trains the same step again. One
module, so that the run is made once (``.ci/run`` spreads modules over two pytest-xdist workers, ``--dist
loadfile``).

The run (``pinned_overrides``): 3 steps of the tiny CPU task, a checkpoint every step, the hf rollout's deterministic
mode (one request per generate, each seeded by the prompt, the weights' step and its n-th request, so batching and
arrival order do not change what is sampled), repeated seeds dropped (identical prompts of two records would share
one sample stream), and the frontier ``target`` without a re-visit bound and with cold seats in arrival order, as
the golden commit ran (heapa_grpo's default is ``progress`` with ``max_window_visits: 1`` and ``cold_draw: signal``
since; each has its own unit tests in ``tests/unit/selection/`` and ``tests/unit/pool/``).

**Pinned trace.** A refactor that means to change nothing must reproduce the run. It is reduced to what is an exact
function of the code and the seed: per step the records fed back, their pass rates, the children integrated and a
chosen set of ``pool/``, ``select/``, ``feedback/``, ``augment/``, ``lineage/`` and ``rollout/`` scalars (counts,
fractions and statistics of pass rates, rounded to 6 digits), plus the grad norm (compared to 1e-3 relative: float
sums on other cores may differ in the last bits). Timings, queue depths of the asynchronous teacher and memory are
left out: they follow the machine's load, not the code. A mismatch names the step, the field and both values.

**One reference per CPU kind.** The run starts from the ``tiny`` assets this machine builds, and the pinned kernels
(``verl_ext/cpu/numerics.py``) do not make that build the same on every x86 CPU: an Intel Xeon and an AMD EPYC of
family 25, model 17 build different models (greedy validation 0.455 and 0.505), so the same code traces differently
on them from step 1. Each ``tests/golden/heapa_grpo_trace*.json`` records the build it was made from (``build``: the
fields it must match, and the CPU that made it, which is not compared); the test compares the run with the trace of
this machine's build. The Xeon's trace predates the weights digest and is matched by its greedy accuracy alone. A
build no trace was made from (another CPU kind) skips the comparison and names the build: record its trace on such
a machine (below); the determinism check further down still runs there.

``test_golden_checkpoint_loads`` loads the pool/sampler/recipe state files that the golden commit's code wrote at
its last step (``tests/golden/heapa_grpo_ckpt/``, a few KB, no model weights) with today's code, configured by
the same overrides, and checks that nothing is lost and the next batch is the golden one: old checkpoints must
keep loading. It needs no Ray (about 20 s) and is not marked e2e, so ``-m "not e2e"`` runs it.

Regenerating: ``VERL_EXT_UPDATE_GOLDEN=1 .venv/bin/python -m pytest -q tests/e2e/test_pinned_run.py -k golden``
rewrites this build's trace and the checkpoint files, or writes a new trace file alone for a build without one
(``scripts/update_golden.sh`` does it from a clean clone of a given commit). That is legitimate only for an intended
change of behaviour (selection, feedback, augmentation, rollout sampling, the tiny assets), and the commit that
carries the new file says which change and why; it deletes the traces of the CPU kinds it could not rerun, which
then skip until a session on such a CPU records them again. A refactor never regenerates them.

**Determinism.** Every run is held to the golden trace at every step, so a run that differs from itself differs
from the golden. The fallback run below (the same command restarted from step 2's checkpoint) must also train step
3 exactly as the pinned run did: the same records selected, the same children integrated, the same pass rates and
pool statistics. To compare two commits, run this command on each and diff the trace files
(``heapa.trace_file``) and ``metrics.jsonl``.

**Checkpoint fallback** (``recipe/heapa/ops/checkpoint_manifest.py``). For each part of the latest checkpoint in
turn (an actor shard, the dataloader state, the pool file, the recipe state), a copy of the run has that part cut to
half its size, and the start-up check the trainer runs first (``choose_resume``, no Ray) must name the damaged file
and pick ``global_step_2``: what the trainer loads then is step 2's complete folder, whichever part of step 3 was
damaged.
One copy, its actor shard damaged, is started again for 4 steps with ``resume_mode=auto`` through the real
trainer: it resumes from step 2 (trains steps 3 and 4, step 3 as the pinned run did), names the damaged file in its
log, and the metrics history stays one history.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import pickle
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from recipe.heapa.ops.checkpoint_manifest import choose_resume
from verl_ext.cpu.numerics import cpu_name

GOLDEN_DIR = Path(__file__).resolve().parents[1] / "golden"
GOLDEN_TRACES = "heapa_grpo_trace*.json"
GOLDEN_CKPT = GOLDEN_DIR / "heapa_grpo_ckpt"
UPDATE = os.environ.get("VERL_EXT_UPDATE_GOLDEN") == "1"
STEPS = 3
DIGITS = 6
GRAD_NORM_REL = 1e-3
# exact functions of the run (counts, fractions, pass-rate statistics); no timings, no teacher queue depths
METRICS = (
    "feedback/n_records", "feedback/n_rollouts", "feedback/mean_pass_rate", "feedback/frac_all_correct",
    "feedback/frac_all_wrong", "feedback/evicted_groups_fed_back",
    "pool/size_scored", "pool/size_cold", "pool/size_archive", "pool/size_live", "pool/size_in_flight",
    "pool/size_scored_children", "pool/measured", "pool/evicted", "pool/frontier_size", "pool/value_min",
    "pool/value_max", "pool/center", "pool/frac_near_target",
    "select/frac_cold", "select/frac_children", "select/frac_boundary", "select/frac_extreme",
    "select/mean_posterior_rate", "select/n_selected", "select/selections", "select/short_selections",
    "select/buffered", "select/outstanding",
    "augment/inserted", "augment/drained", "augment/parents_last_step",
    "lineage/nodes", "lineage/edges", "lineage/max_depth",
    "rollout/gen_responses", "rollout/gen_tokens",
)
TOLERANT = {"actor/grad_norm": GRAD_NORM_REL}
# the determinism check: exactly equal in the two runs of one command
EXACT = ("feedback/n_records", "feedback/n_rollouts", "feedback/mean_pass_rate", "feedback/frac_all_correct",
         "feedback/frac_all_wrong", "pool/size_scored", "pool/size_cold", "pool/size_archive", "select/frac_cold",
         "select/frac_children", "rollout/gen_responses", "rollout/gen_tokens", "augment/inserted")
CKPT_PARTS = ("actor/model_world_size_1_rank_0.pt", "data.pt", "pool_state.pkl", "heapa_state.json")


def pinned_overrides(e2e_runner, assets: Path, out: Path, *, steps: int = STEPS,
                     resume_mode: str | None = None) -> list[str]:
    return e2e_runner.recipe_overrides(assets, out, "heapa_grpo", steps=steps, save_freq=1,
                                       resume_mode=resume_mode) + [
        "+actor_rollout_ref.rollout.engine_kwargs.hf.deterministic=true", "heapa.rows.duplicates=drop",
        "heapa.selection.kwargs.boundary=target", "heapa.selection.kwargs.max_window_visits=null",
        "heapa.selection.kwargs.cold_draw=arrival"]


@dataclass(frozen=True)
class PinnedRun:
    out: Path  # run.log, metrics.jsonl, trace.jsonl, ckpt/global_step_{1,2,3}: read it or copy it, never change it
    metrics: dict
    trace: dict


@pytest.fixture(scope="module")
def pinned_run(tiny_assets, repo_root, e2e_runner, tmp_path_factory) -> PinnedRun:
    out = tmp_path_factory.mktemp("pinned") / "run"
    metrics, trace = e2e_runner.run_recipe(repo_root, out, pinned_overrides(e2e_runner, tiny_assets, out))
    return PinnedRun(out, metrics, trace)


def build_fingerprint(assets: Path) -> dict:
    """What identifies the ``tiny`` build a run starts from: its greedy validation accuracy and its weights' digest."""
    manifest = json.loads((assets / "manifest.json").read_text())
    digest = hashlib.sha256()
    for weights in sorted((assets / "model").glob("*.safetensors")):
        digest.update(weights.read_bytes())
    return {"greedy_val_accuracy": manifest["greedy_val_accuracy"]["overall"],
            "weights_sha256": digest.hexdigest()[:16]}


def golden_for(build: dict) -> Path | None:
    """The trace file made from ``build`` (every field it recorded in ``build.match`` equal), or None."""
    for path in sorted(GOLDEN_DIR.glob(GOLDEN_TRACES)):
        match = json.loads(path.read_text()).get("build", {}).get("match", {})
        if match and all(build.get(key) == value for key, value in match.items()):
            return path
    return None


def _round(value):
    return round(float(value), DIGITS) if isinstance(value, (int, float)) else value


def reduce_run(metrics: dict[int, dict], trace: dict[int, dict], ckpt: Path) -> dict:
    """The pinned facts of a run: per step its trace, its per-record pass rates (the checkpoint's
    ``heapa_state.json``) and the chosen metrics (a metric the run did not log is recorded as null)."""
    steps = {}
    for step in range(1, STEPS + 1):
        state = json.loads((ckpt / f"global_step_{step}" / "heapa_state.json").read_text())
        rates = {k: _round(v) for k, v in sorted(state["last_pass_rates"].items(), key=lambda kv: int(kv[0]))}
        steps[str(step)] = {
            "trained": trace[step]["trained"], "children": trace[step]["children"], "pass_rates": rates,
            "metrics": {key: _round(metrics[step].get(key)) for key in (*METRICS, *TOLERANT)},
        }
    return {"method": "heapa_grpo", "steps": steps}


def diff_runs(golden: dict, got: dict) -> list[str]:
    """Every difference, as 'step N field: golden X, got Y'."""
    out = []
    for step, want in golden["steps"].items():
        have = got["steps"].get(step)
        if have is None:
            out.append(f"step {step}: missing from this run")
            continue
        for field in ("trained", "children"):
            if want[field] != have[field]:
                out.append(f"step {step} {field}: golden {want[field]}, got {have[field]}")
        for rid in sorted(set(want["pass_rates"]) | set(have["pass_rates"]), key=int):
            a, b = want["pass_rates"].get(rid), have["pass_rates"].get(rid)
            if a != b:
                out.append(f"step {step} pass_rate[record {rid}]: golden {a}, got {b}")
        for key in sorted(set(want["metrics"]) | set(have["metrics"])):
            a, b = want["metrics"].get(key), have["metrics"].get(key)
            rel = TOLERANT.get(key)
            same = (a == b) if rel is None or a is None or b is None else math.isclose(a, b, rel_tol=rel)
            if not same:
                out.append(f"step {step} {key}: golden {a}, got {b}")
    return out


def _save_golden_checkpoint(folder: Path) -> None:
    """The last step's pool, sampler and recipe state (not the model): what ``test_golden_checkpoint_loads``
    reads. The sampler state lives inside verl's ``data.pt``; it is JSON-safe and is stored as JSON here."""
    import torch

    if GOLDEN_CKPT.exists():
        shutil.rmtree(GOLDEN_CKPT)
    GOLDEN_CKPT.mkdir(parents=True)
    shutil.copy(folder / "pool_state.pkl", GOLDEN_CKPT / "pool_state.pkl")
    state = json.loads((folder / "heapa_state.json").read_text())
    state["saved_at"] = 0.0  # a wall-clock stamp: kept out of the committed file
    (GOLDEN_CKPT / "heapa_state.json").write_text(json.dumps(state, indent=1, sort_keys=True) + "\n")
    data = torch.load(folder / "data.pt", weights_only=False)
    sampler = _find_sampler_state(data)
    (GOLDEN_CKPT / "sampler_state.json").write_text(json.dumps(sampler, indent=1, sort_keys=True) + "\n")


def _find_sampler_state(obj):
    """``PoolBatchSampler.state_dict()`` somewhere inside the dataloader's state (found by its keys)."""
    if isinstance(obj, dict):
        if {"strategy", "buffer", "outstanding", "train_batch_size"} <= set(obj):
            return obj
        for value in obj.values():
            found = _find_sampler_state(value)
            if found is not None:
                return found
    return None


def _dump(golden: dict) -> str:
    """JSON with one line per step field: small, and a regenerated file diffs by step and field."""
    lines = ['{"method": %s, "build": %s, "steps": {' % (json.dumps(golden["method"]),
                                                          json.dumps(golden["build"], sort_keys=True))]
    for n, (step, fields) in enumerate(golden["steps"].items()):
        lines.append(f' "{step}": {{')
        lines += [f'  "{k}": {json.dumps(v, sort_keys=True)}' + ("," if i < len(fields) - 1 else "")
                  for i, (k, v) in enumerate(sorted(fields.items()))]
        lines.append(" }" + ("," if n < len(golden["steps"]) - 1 else ""))
    return "\n".join(lines + ["}}"]) + "\n"


@pytest.mark.e2e
@pytest.mark.slow
def test_short_heapa_grpo_run_matches_the_golden_trace(pinned_run, tiny_assets):
    metrics, trace, out = pinned_run.metrics, pinned_run.trace, pinned_run.out
    assert sorted(trace) == list(range(1, STEPS + 1)), sorted(trace)
    got = reduce_run(metrics, trace, out / "ckpt")
    build = build_fingerprint(tiny_assets)
    path = golden_for(build)
    if UPDATE:
        GOLDEN_DIR.mkdir(parents=True, exist_ok=True)
        # a new CPU kind's trace leaves the checkpoint files alone: they test loading, which no CPU changes
        rewrite = path is not None or not GOLDEN_CKPT.exists()
        path = path or GOLDEN_DIR / f"heapa_grpo_trace.{build['weights_sha256']}.json"
        recorded = json.loads(path.read_text())["build"]["match"] if path.exists() else build
        path.write_text(_dump({**got, "build": {"made_on": cpu_name(), "match": recorded}}))
        if rewrite:
            _save_golden_checkpoint(out / "ckpt" / f"global_step_{STEPS}")
        pytest.skip(f"VERL_EXT_UPDATE_GOLDEN=1: wrote {path}" + (f" and {GOLDEN_CKPT}" if rewrite else ""))
    if path is None:
        pytest.skip(f"no golden trace was made from the tiny build this CPU makes ({build}, {cpu_name()}): record "
                    "one with VERL_EXT_UPDATE_GOLDEN=1 (this module's docstring)")
    differences = diff_runs(json.loads(path.read_text()), got)
    assert not differences, (f"{len(differences)} difference(s) from {path.name} (regenerate only for an intended "
                             "behaviour change, see this module's docstring):\n" + "\n".join(differences[:40]))


def _load_golden_checkpoint(e2e_runner, tiny_assets: Path):
    """Today's code, configured as the pinned run was (the recipe's Hydra config, the same overrides), loading the
    golden commit's state files: the trainer's own load path minus the model (``ops/trainer_checkpoints.py``)."""
    from hydra import compose, initialize_config_dir
    from omegaconf import open_dict

    from recipe.heapa.stages.augmentation import AugmentationStage
    from recipe.heapa.step.rollout_cost import RolloutCost
    from recipe.heapa.settings import parse_settings, strategy_kwargs
    from verl_ext.adapters.dataset import PoolDataset
    from verl_ext.adapters.pool_file import FILE_NAME
    from verl_ext.adapters.sampler import PoolBatchSampler
    from verl_ext.pool.lineage import LineageRefresher
    from verl_ext.selection import build_strategy

    config_dir = Path(__file__).resolve().parents[2] / "recipe" / "heapa" / "config"
    overrides = pinned_overrides(e2e_runner, tiny_assets, Path("/nonexistent"))  # nothing is written
    with initialize_config_dir(config_dir=str(config_dir), version_base=None):
        cfg = compose(config_name="heapa_trainer", overrides=overrides)
    with open_dict(cfg):
        cfg.heapa.method = "heapa_grpo"  # `${hydra:...}` resolves only inside a running Hydra app
    h = parse_settings(OmegaConf.to_container(cfg.heapa, resolve=True))
    data = cfg.data
    dataset = PoolDataset.from_config(data.train_files, None, pool_config=h.pool, row_format=h.rows, seed=h.seed,
                                      max_samples=data.train_max_samples, data_config=data)
    strategy = build_strategy(h.selection_name, **strategy_kwargs(h.selection_name, h.selection_kwargs, h.seed))
    sampler = PoolBatchSampler(dataset, strategy, data.train_batch_size, data.train_batch_size)
    state = json.loads((GOLDEN_CKPT / "heapa_state.json").read_text())
    with open(GOLDEN_CKPT / "pool_state.pkl", "rb") as f:
        records = len(pickle.load(f)["pool"]["records"])  # noqa: S301 - our own committed file
    dataset.checkpoint_dir = str(GOLDEN_CKPT)
    dataset.load_state_dict({"schema_version": 2, "pool_file": {"file": FILE_NAME, "path": "", "records": records}})
    dataset.checkpoint_dir = None
    sampler.load_state_dict(json.loads((GOLDEN_CKPT / "sampler_state.json").read_text()))
    lineage = LineageRefresher(dataset.pool, h.lineage)
    lineage.load_state_dict(state["lineage"])
    augment = AugmentationStage(h.augmentation, h.teacher, None, dataset.pool, lineage, seed=h.seed)
    try:
        augment.load_state_dict(state["augment"])
        augment_counters = dict(augment.counters)
    finally:
        augment.close()
    cost = RolloutCost()
    cost.load_state_dict(state["rollout_cost"])
    return dataset, sampler, lineage, augment_counters, cost, state


def test_each_golden_trace_names_one_build():
    """Every trace file says which build it was made from, and no build matches two of them (the test would pick
    one arbitrarily); the Xeon's trace is matched by its greedy accuracy, which no other build recorded shares."""
    traces = sorted(GOLDEN_DIR.glob(GOLDEN_TRACES))
    assert len(traces) >= 2, traces
    builds = [json.loads(path.read_text())["build"] for path in traces]
    assert all(build["match"] and build["made_on"] for build in builds), builds
    for path, build in zip(traces, builds):
        full = {"greedy_val_accuracy": None, "weights_sha256": None, **build["match"]}
        assert golden_for(full) == path, (path, build)
        assert [golden_for({**full, key: "other"}) for key in build["match"]] == [None] * len(build["match"]), path


def test_golden_checkpoint_loads(tiny_assets, e2e_runner):
    """The pool/sampler/lineage/augmentation state the golden commit saved loads, round-trips unchanged, and the
    restored pool and strategy hand out the same next batch as the golden commit's code did."""
    from verl_ext.pool import PoolConfig

    dataset, sampler, lineage, augment_counters, cost, state = _load_golden_checkpoint(e2e_runner, tiny_assets)
    with open(GOLDEN_CKPT / "pool_state.pkl", "rb") as f:
        saved_pool = pickle.load(f)["pool"]  # noqa: S301 - our own committed file
    now = dataset.pool.state_dict()
    added = set(now["config"]) - set(saved_pool["config"])  # fields newer than the golden commit
    defaults = PoolConfig().to_dict()
    assert all(now["config"][k] == defaults[k] for k in added), "a field added since is not at its default"
    saved_pool["config"] = {**{k: now["config"][k] for k in added}, **saved_pool["config"]}
    assert now["config"] == saved_pool["config"], "the pool config the same run builds today differs from the golden"
    known = len(saved_pool["record_fields"])  # record fields newer than the golden commit are unset in its records
    assert now["record_fields"][:known] == saved_pool["record_fields"]
    assert all(value is None for row in now["records"] for value in row[known:]), "a newer record field is set"
    now = {**now, "record_fields": now["record_fields"][:known], "records": [row[:known] for row in now["records"]]}
    new_counters = set(now["counters"]) - set(saved_pool["counters"])  # counters newer than the golden commit
    assert all(now["counters"][k] == 0 for k in new_counters), "a counter added since counted in the golden run"
    saved_pool["counters"] = {**dict.fromkeys(new_counters, 0), **saved_pool["counters"]}
    assert now == saved_pool
    assert sampler.state_dict() == json.loads((GOLDEN_CKPT / "sampler_state.json").read_text())
    assert lineage.state_dict() == state["lineage"]
    assert augment_counters == state["augment"]["counters"]
    assert cost.state_dict() == state["rollout_cost"]
    sampler.set_step(STEPS + 1)
    got = {"next_batch": sampler.next_batch(), "pool_metrics": {k: _round(v) for k, v in dataset.pool.metrics().items()
                                                                 if k in METRICS}}
    expected_path = GOLDEN_CKPT / "next_batch.json"
    if UPDATE:
        expected_path.write_text(json.dumps(got, sort_keys=True) + "\n")
        pytest.skip(f"VERL_EXT_UPDATE_GOLDEN=1: wrote {expected_path}")
    expected = json.loads(expected_path.read_text())
    assert got == expected


def assert_same_step(ma: dict, ta: dict, mb: dict, tb: dict, step: int) -> None:
    """Step ``step`` of two runs selected, integrated and measured exactly the same (grad norm within 1e-4)."""
    assert ta[step]["trained"] == tb[step]["trained"], step
    assert ta[step]["children"] == tb[step]["children"], step
    for key in EXACT:
        assert ma[step].get(key) == mb[step].get(key), (step, key, ma[step].get(key), mb[step].get(key))
    assert ma[step]["actor/grad_norm"] == pytest.approx(mb[step]["actor/grad_norm"], rel=1e-4)


def _damaged_copy(pinned_run: PinnedRun, dest: Path, part: str) -> Path:
    for step in (1, 2, 3):
        assert (pinned_run.out / "ckpt" / f"global_step_{step}" / "heapa_manifest.json").exists()
    shutil.copytree(pinned_run.out, dest)
    damaged = dest / "ckpt" / "global_step_3" / part
    damaged.write_bytes(damaged.read_bytes()[: damaged.stat().st_size // 2])
    return dest


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.parametrize("part", CKPT_PARTS)
def test_the_start_up_check_names_a_damaged_part_and_picks_the_previous_step(part, pinned_run, tmp_path, caplog):
    run = _damaged_copy(pinned_run, tmp_path / "run", part)
    config = OmegaConf.create({"trainer": {"resume_mode": "auto", "resume_from_path": None,
                                           "default_local_dir": str(run / "ckpt")}})
    with caplog.at_level(logging.WARNING, logger="recipe.heapa.ops.checkpoint_manifest"):
        chosen = choose_resume(config)
    assert chosen == run / "ckpt" / "global_step_2"
    assert (config.trainer.resume_mode, config.trainer.resume_from_path) == ("resume_path", str(chosen))
    assert f"global_step_3/{part}" in caplog.text
    assert "resuming from the newest complete checkpoint instead" in caplog.text


@pytest.mark.e2e
@pytest.mark.slow
def test_a_damaged_latest_checkpoint_resumes_from_the_previous_one(pinned_run, tiny_assets, repo_root, e2e_runner,
                                                                   tmp_path):
    part = CKPT_PARTS[0]
    run = _damaged_copy(pinned_run, tmp_path / "run", part)
    metrics, trace = e2e_runner.run_recipe(repo_root, run, pinned_overrides(e2e_runner, tiny_assets, run, steps=4,
                                                                            resume_mode="auto"))
    log = (run / "run.log").read_text(errors="replace")
    assert f"global_step_3/{part}" in log and "resuming from the newest complete checkpoint instead" in log
    assert "global_step_2" in log
    # resumed at step 2: steps 3 and 4 trained again, the history has every step once (the damaged attempt's
    # step 3 kept in the attempt file)
    assert sorted(metrics) == [1, 2, 3, 4] and sorted(trace) == [1, 2, 3, 4]
    lines = e2e_runner.metric_lines(run / "metrics.jsonl")
    assert [row["step"] for row in lines] == [1, 2, 3, 4]
    assert (run / "ckpt" / "global_step_4" / "heapa_manifest.json").exists()
    # determinism: the command, restarted from step 2's checkpoint, trains step 3 exactly as the pinned run did
    # (steps 1-2 of every run are held to the golden trace above)
    assert_same_step(pinned_run.metrics, pinned_run.trace, metrics, trace, 3)
    # heapa_state.json came back: the rollout cost continues from step 2's count instead of restarting
    assert metrics[3]["rollout/gen_responses_cum"] == pinned_run.metrics[3]["rollout/gen_responses_cum"]
    # the restored weights reached the fresh rollout server (fp32: ~1e-6; a server left on the initial weights
    # differs by orders more), so the resumed step samples what the pinned run sampled
    assert all(metrics[s]["training/rollout_probs_diff_max"] < 1e-4 for s in (3, 4))
