"""verl-heapa: HeaPA, AR3PO and HIVE on verl 0.9.1 (see README.md)."""

from setuptools import find_packages, setup

# Ranges a cluster can satisfy; only verl is exact (it breaks extension APIs between minors). Floors follow verl
# 0.9.1's own requirements where we use nothing newer; the versions CI runs are listed in docs/run_files.md.
INSTALL_REQUIRES = [
    "verl==0.9.1",
    # verl-core's packages that the base wheel lacks (the trainers import them)
    "TransferQueue>=0.1.10,<0.2",
    "cachetools",
    "uvicorn",
    "fastapi",
    "msgspec",
    "pyzmq",
    "ray[default]>=2.41,<3",
    "psutil",  # the driver ends every process its local Ray cluster left (recipe/heapa/ops/ray_cleanup.py)
    "hydra-core>=1.3,<1.4",
    "omegaconf>=2.3,<2.4",
    "math-verify>=0.9,<0.10",
    "wandb>=0.17,<1",
    "openai>=1.40,<4",  # the teacher client; tested with 1.40.0, 1.109.1 and 3.57.0
    "torch>=2.6",  # setup_env.sh installs the CPU build first; the gpu extra brings the build vLLM needs
    "torchdata>=0.8",  # StatefulDataLoader
    "numpy>=2.0",
    "pandas",
    "pyarrow>=19",
    "datasets",
    "tokenizers",
    "matplotlib",  # the comparison and simulator CLIs draw their curves by default
    "tabulate>=0.9",  # the Markdown tables of the comparison, evaluation, simulator and benchmark CLIs
    "tqdm>=4.60",  # the simulator benchmark's progress bar (stderr)
    "pydantic>=2.5,<3",  # typed, validated component configs (DESIGN.md "Config = typed models")
    # transformers and tensordict: verl 0.9.1 pins their ranges itself
]

setup(
    name="verl-heapa",
    version="0.1.0",
    description="Bounded evolving prompt pools, heap boundary sampling and on-policy augmentation for verl",
    long_description=open("README.md", encoding="utf-8").read() if __import__("os").path.exists("README.md") else "",
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    packages=find_packages(include=["verl_ext", "verl_ext.*", "recipe", "recipe.*"]),
    # every preset, including the method/ and platform/ groups (a test installs the wheel and composes them)
    package_data={"recipe.heapa": ["config/*.yaml", "config/**/*.yaml"], "verl_ext.sim": ["scenarios/*.yaml"]},
    install_requires=INSTALL_REQUIRES,
    extras_require={
        "test": ["pytest>=8", "hypothesis>=6.100", "pytest-asyncio", "pytest-timeout", "pytest-xdist", "matplotlib"],
        "sim": ["matplotlib"],
        # GPU clusters: verl 0.9.1's own vllm set (vllm 0.24.0, torch 2.11.0, transformers 5.9.0), tested together
        "gpu": ["verl[vllm]==0.9.1"],
    },
    entry_points={"verl.plugins": ["heapa = verl_ext.plugin"]},
)
