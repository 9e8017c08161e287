"""Build the carry bundle for a lent GPU machine (docs/device_smoke.md).

The lent machine has Python 3.12 with torch and transformers (and their own dependencies: numpy, tokenizers,
huggingface_hub, safetensors, pyyaml, regex, jinja2, sympy, ...), no network and at most 64 MiB carried in, the
working tree included. This gathers everything else verl 0.9.1 and this project import at run time, as wheels for
the target Python (``pip download --no-deps``, pinned to the versions this project's venv runs), unpacks them into
one site tree, prunes what the smoke run never imports (Ray's Java jars, dashboard client, RLlib/Tune/Serve/Train/
Data; pyarrow's Flight and cloud file systems; every ``tests`` folder, C headers and Cython sources), strips the
symbol tables of unstripped ELF files outside auditwheel's ``*.libs`` folders (those were rewritten by patchelf,
which ``strip`` can corrupt), adds the project's model assets and writes one solid ``.tar.xz`` (Ray's three
binaries share most of their statically linked code: a solid archive with a 64 MiB dictionary stores it once).

    python scripts/device_smoke/build_bundle.py                     # -> .device_bundle/carry/bundle.tar.xz
    python scripts/device_smoke/build_bundle.py --python-version 3.11 --out .device_bundle/py311   # dry-run twin

Writes ``<out>/carry/bundle.tar.xz`` and ``<out>/carry/manifest.json`` (what is inside, sizes per component, the
working tree's size) and ``<out>/sizes.md``. Exit code 3 when bundle + working tree exceed ``--limit-mib``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import tarfile
import time
import zipfile
from pathlib import Path

logger = logging.getLogger("build_bundle")

ROOT = Path(__file__).resolve().parents[2]
MIB = 1024 * 1024
# Versions this project's venv runs (tests pass with them). Found by importing the trainer, the FSDP engine
# workers, the agent loop, the hf rollout and the evaluation CLI and mapping sys.modules to distributions, minus
# torch, transformers and what they pull in (present on the lent machine).
PINS = [
    "verl==0.9.1", "ray==2.60.0", "TransferQueue==0.1.11", "accelerate==1.15.0", "aiohappyeyeballs==2.7.1",
    "aiohttp==3.14.5", "aiosignal==1.4.0", "annotated-types==0.8.0", "attrs==26.1.0", "cachetools==8.0.2",
    "charset-normalizer==3.5.3", "cloudpickle==3.1.3", "codetiming==1.4.0", "colorful==0.5.8", "datasets==5.2.0",
    "dill==0.4.1", "fastapi==0.165.0", "frozenlist==1.8.0", "google-api-core==2.44.0", "google-auth==2.63.0",
    "googleapis-common-protos==1.76.0", "hydra-core==1.3.8", "jsonschema==4.26.0",
    "jsonschema-specifications==2025.9.1", "msgpack==1.2.4", "msgspec==0.23.0", "multidict==7.2.1",
    "multiprocess==0.70.19", "omegaconf==2.3.1", "opentelemetry-api==1.45.2",
    "opentelemetry-exporter-http-transport==0.66b2", "opentelemetry-exporter-otlp-common==0.66b2",
    "opentelemetry-exporter-otlp-proto-common==1.45.2", "opentelemetry-exporter-otlp-proto-http==1.45.2",
    "opentelemetry-exporter-prometheus==0.66b2", "opentelemetry-proto==1.45.2", "opentelemetry-sdk==1.45.2",
    "opentelemetry-semantic-conventions==0.66b2", "orjson==3.13.0", "pandas==3.1.1", "peft==0.21.2",
    "pillow==13.0.0", "propcache==0.5.4", "protobuf==7.36.2", "psutil==7.2.2", "pyarrow==26.0.1",
    "pydantic==2.14.4", "pydantic_core==2.50.5", "python-dateutil==4.0.0", "pyvers==0.1.0", "pyzmq==27.3.0",
    "referencing==0.37.0", "requests==2.34.2", "rpds-py==2026.9.1", "starlette==1.10.0", "tabulate==0.10.0",
    "tensordict==0.10.0", "torchdata==0.11.0", "typing-inspection==0.4.5", "urllib3==2.8.0", "uvicorn==0.54.0",
    "xxhash==4.1.0", "yarl==1.25.1", "math-verify==0.9.0", "latex2sympy2_extended==1.11.0", "pylatexenc==2.11",
]
# sdist only on PyPI (hydra pins antlr 4.9.*): built here into a pure-Python wheel.
SDIST_PINS = ["antlr4-python3-runtime==4.9.3"]
# Importable on the lent machine already (torch's and transformers' dependencies); run_on_device.sh checks them.
DEVICE_PROVIDED = ["torch", "transformers", "tokenizers", "huggingface_hub", "safetensors", "numpy", "yaml", "regex",
                   "jinja2", "sympy", "networkx", "filelock", "fsspec", "packaging", "tqdm", "httpx", "typing_extensions"]
PLATFORMS = ["manylinux2014_x86_64", "manylinux_2_17_x86_64", "manylinux_2_24_x86_64", "manylinux_2_26_x86_64",
             "manylinux_2_27_x86_64", "manylinux_2_28_x86_64"]
# Paths (relative to the site tree) the smoke run never imports. verl imports ray.actor, ray.util.* (placement
# groups, scheduling strategies, collective), ray.experimental.state.api (-> ray.util.state -> ray.dashboard's
# SDK modules, so the dashboard's Python stays; its built web client goes).
PRUNE = [
    "tests",  # verl's wheel ships a top-level `tests` package; the project's own tests must not meet it
    "ray/jars", "ray/rllib", "ray/tune", "ray/serve", "ray/train", "ray/data", "ray/llm", "ray/air", "ray/workflow",
    "ray/cpp", "ray/dashboard/client", "ray/widgets", "ray/util/dask", "ray/util/spark", "ray/util/joblib",
    "ray/util/multiprocessing", "ray/util/xgboost", "ray/util/lightgbm",
    "pyarrow/include", "pyarrow/src", "pyarrow/tests",
    "pandas/tests",
]
PRUNE_GLOBS = [
    "pyarrow/libarrow_flight.so*", "pyarrow/_flight*.so", "pyarrow/libarrow_python_flight.so*",
    "pyarrow/libarrow_s3.so*", "pyarrow/_s3fs*.so", "pyarrow/_azurefs*.so", "pyarrow/_gcsfs*.so",
    "pyarrow/*.pyx", "pyarrow/*.pxd", "pyarrow/**/*.pxd", "pyarrow/**/*.h",
    "**/*.js.map",
]


def run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    logger.info("$ %s", " ".join(cmd))
    return subprocess.run(cmd, check=True, **kw)


def tree_bytes(path: Path) -> int:
    return sum(p.lstat().st_size for p in path.rglob("*") if p.is_file() or p.is_symlink())


def download(wheels: Path, python_version: str, python: str) -> None:
    stamp = wheels / ".complete"
    key = hashlib.sha256(json.dumps([PINS, SDIST_PINS, python_version]).encode()).hexdigest()
    if stamp.exists() and stamp.read_text() == key:
        return
    wheels.mkdir(parents=True, exist_ok=True)
    plat = [a for p in PLATFORMS for a in ("--platform", p)]
    run([python, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--python-version", python_version,
         *plat, "-d", str(wheels), *PINS])
    run([python, "-m", "pip", "wheel", "--no-deps", "-w", str(wheels), *SDIST_PINS])
    stamp.write_text(key)


def unpack(wheels: Path, site: Path) -> dict[str, dict]:
    """Extract every wheel into ``site``; returns per distribution: wheel bytes and the top-level names it owns."""
    comps: dict[str, dict] = {}
    for whl in sorted(wheels.glob("*.whl")):
        dist = whl.name.split("-")[0]
        tops: set[str] = set()
        with zipfile.ZipFile(whl) as zf:
            for info in zf.infolist():
                name = info.filename
                if ".data/" in name.split("/")[0] + "/":
                    parts = name.split("/")
                    if len(parts) > 2 and parts[1] in ("purelib", "platlib"):
                        name = "/".join(parts[2:])
                    else:
                        continue  # scripts, headers, data: nothing the smoke run imports
                if name.endswith("/"):
                    continue
                target = site / name
                target.parent.mkdir(parents=True, exist_ok=True)
                with zf.open(info) as src, open(target, "wb") as dst:
                    shutil.copyfileobj(src, dst)
                mode = (info.external_attr >> 16) & 0o777
                if mode:
                    os.chmod(target, mode)
                tops.add(name.split("/")[0])
        comps[dist] = {"wheel_bytes": whl.stat().st_size, "tops": sorted(tops)}
    return comps


def prune(site: Path) -> int:
    removed = 0
    for rel in PRUNE:
        p = site / rel
        if p.exists():
            removed += tree_bytes(p)
            shutil.rmtree(p)
    for pattern in PRUNE_GLOBS:
        for p in site.glob(pattern):
            if p.is_file():
                removed += p.stat().st_size
                p.unlink()
    for p in sorted(site.rglob("tests"), reverse=True):  # test suites inside packages (pandas, pyarrow, ...)
        if p.is_dir() and not p.is_symlink() and p.parent != site:
            removed += tree_bytes(p)
            shutil.rmtree(p)
    return removed


def _is_elf(path: Path) -> bool:
    with open(path, "rb") as fh:
        return fh.read(4) == b"\x7fELF"


def strip_binaries(site: Path) -> tuple[int, list[str]]:
    """``strip --strip-unneeded`` on ELF files that still carry a symbol table, outside ``*.libs`` folders."""
    saved, done = 0, []
    if shutil.which("strip") is None:
        logger.warning("no `strip` on this machine: binaries kept as shipped")
        return 0, done
    for p in site.rglob("*"):
        if not p.is_file() or p.is_symlink() or any(part.endswith(".libs") for part in p.relative_to(site).parts):
            continue
        if not (p.suffix == ".so" or ".so." in p.name or os.access(p, os.X_OK)) or not _is_elf(p):
            continue
        info = subprocess.run(["file", "-b", str(p)], capture_output=True, text=True).stdout
        if "not stripped" not in info:
            continue
        before = p.stat().st_size
        if subprocess.run(["strip", "--strip-unneeded", str(p)], capture_output=True).returncode == 0:
            saved += before - p.stat().st_size
            done.append(str(p.relative_to(site)))
    return saved, done


def dedupe(site: Path) -> int:
    """Identical files in one folder (pyarrow ships libarrow_python.so three times) -> relative symlinks."""
    saved = 0
    by_dir: dict[tuple, Path] = {}
    for p in sorted(site.rglob("*.so*")):
        if not p.is_file() or p.is_symlink() or p.stat().st_size < 256 * 1024:
            continue
        digest = hashlib.sha256(p.read_bytes()).hexdigest()
        key = (p.parent, digest)
        if key in by_dir:
            saved += p.stat().st_size
            p.unlink()
            p.symlink_to(by_dir[key].name)
        else:
            by_dir[key] = p
    return saved


def working_tree_bytes() -> int:
    """What the carry mechanism copies besides named ignored paths: tracked + untracked-not-ignored files."""
    out = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, capture_output=True,
                         check=True).stdout
    total = 0
    for rel in filter(None, out.decode().split("\0")):
        p = ROOT / rel
        if p.is_file():
            total += p.stat().st_size
    return total


def build(args: argparse.Namespace) -> dict:
    out = Path(args.out).resolve()
    wheels = out / f"wheels-cp{args.python_version.replace('.', '')}"
    stage = out / "stage"
    carry = out / "carry"
    python = args.pip_python or sys.executable
    download(wheels, args.python_version, python)
    if stage.exists():
        shutil.rmtree(stage)
    site = stage / "site"
    site.mkdir(parents=True)
    comps = unpack(wheels, site)
    unpacked = tree_bytes(site)
    pruned = prune(site)
    stripped, stripped_files = strip_binaries(site) if not args.no_strip else (0, [])
    deduped = dedupe(site)
    for dist, c in comps.items():
        c["pruned_bytes"] = sum(tree_bytes(site / t) if (site / t).is_dir() else
                                ((site / t).lstat().st_size if (site / t).exists() else 0) for t in c["tops"])
    assets_src = Path(args.assets).resolve()
    if not (assets_src / "manifest.json").exists():
        run([python, "-m", "verl_ext.cpu.assets", "--profile", args.assets_profile, "--out", str(assets_src)], cwd=ROOT)
    shutil.copytree(assets_src, stage / "assets", ignore=shutil.ignore_patterns("*.lock"))
    manifest = {
        "python_version": args.python_version, "assets_profile": args.assets_profile,
        "pins": PINS + SDIST_PINS, "device_provided": DEVICE_PROVIDED,
        "prune": PRUNE + PRUNE_GLOBS, "stripped_files": stripped_files,
        "built": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }
    (stage / "bundle.json").write_text(json.dumps(manifest, indent=1))
    if carry.exists():
        shutil.rmtree(carry)
    carry.mkdir(parents=True)
    archive = carry / "bundle.tar.xz"
    t0 = time.time()
    # One solid xz stream (-9: 64 MiB dictionary, one block): Ray's three binaries (raylet, gcs_server,
    # _raylet.so) share most of their statically linked code and sit within one dictionary span in name order.
    tar = subprocess.Popen(["tar", "-C", str(stage), "--sort=name", "--owner=0", "--group=0", "-cf", "-", "site",
                            "assets", "bundle.json"], stdout=subprocess.PIPE)
    with open(archive, "wb") as dst:
        xz = subprocess.Popen(["xz", f"-{args.xz_level}", f"-T{args.xz_threads}", "--block-size=1GiB", "-c"],
                              stdin=tar.stdout, stdout=dst)
        tar.stdout.close()
        if xz.wait() != 0 or tar.wait() != 0:
            raise RuntimeError("tar | xz failed")
    xz_s = time.time() - t0
    bundle = archive.stat().st_size
    tree = working_tree_bytes()
    per = {d: {"wheel_mib": round(c["wheel_bytes"] / MIB, 2), "unpacked_pruned_mib": round(c["pruned_bytes"] / MIB, 2)}
           for d, c in sorted(comps.items(), key=lambda kv: -kv[1]["pruned_bytes"])}
    sizes = {
        "wheels_mib": round(sum(c["wheel_bytes"] for c in comps.values()) / MIB, 2),
        "unpacked_mib": round(unpacked / MIB, 2), "pruned_mib": round(pruned / MIB, 2),
        "stripped_mib": round(stripped / MIB, 2), "deduped_mib": round(deduped / MIB, 2),
        "site_after_mib": round(tree_bytes(site) / MIB, 2), "assets_mib": round(tree_bytes(stage / "assets") / MIB, 2),
        "bundle_xz_mib": round(bundle / MIB, 2), "working_tree_mib": round(tree / MIB, 2),
        "total_carry_mib": round((bundle + tree) / MIB, 2), "limit_mib": args.limit_mib, "xz_seconds": round(xz_s),
        "per_distribution": per,
    }
    manifest["sizes"] = sizes
    (carry / "manifest.json").write_text(json.dumps(manifest, indent=1))
    lines = ["| component | MiB |", "|---|---:|"]
    lines += [f"| {k} | {v} |" for k, v in sizes.items() if k != "per_distribution"]
    lines += ["", "| distribution | wheel MiB | unpacked after pruning MiB |", "|---|---:|---:|"]
    lines += [f"| {d} | {v['wheel_mib']} | {v['unpacked_pruned_mib']} |" for d, v in per.items()]
    (out / "sizes.md").write_text("\n".join(lines) + "\n")
    if not args.keep_stage:
        shutil.rmtree(stage)
    return sizes


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", default=str(ROOT / ".device_bundle"))
    p.add_argument("--python-version", default="3.12", help="the lent machine's Python (3.11: a twin for dry runs)")
    p.add_argument("--assets-profile", default="tiny", choices=("tiny", "learn", "gpu"))
    p.add_argument("--assets", default=None, help="assets folder (default .assets/<profile>; built when missing)")
    p.add_argument("--limit-mib", type=float, default=45.0, help="bundle + working tree must stay under this")
    p.add_argument("--xz-level", default="9")
    p.add_argument("--xz-threads", type=int, default=1, help="more threads split the archive: worse ratio")
    p.add_argument("--no-strip", action="store_true")
    p.add_argument("--keep-stage", action="store_true", help="keep the unpacked tree (<out>/stage) for inspection")
    p.add_argument("--pip-python", default=None, help="interpreter whose pip downloads (default: this one)")
    args = p.parse_args(argv)
    args.assets = args.assets or str(ROOT / ".assets" / args.assets_profile)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    sizes = build(args)
    sys.stdout.write(json.dumps({k: v for k, v in sizes.items() if k != "per_distribution"}) + "\n")
    return 0 if sizes["total_carry_mib"] <= args.limit_mib else 3


if __name__ == "__main__":
    sys.exit(main())
