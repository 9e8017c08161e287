"""verl-heapa: HeaPA, AR3PO and HIVE on verl 0.9.1 (see README.md)."""

from setuptools import find_packages, setup

# Versions proven together on verl 0.9.1 (../shared/spec/verl.md); verl breaks extension APIs between minors.
INSTALL_REQUIRES = [
    "verl==0.9.1",
    # verl-core's packages that the base wheel lacks (the trainers import them)
    "TransferQueue==0.1.11",
    "cachetools",
    "uvicorn",
    "fastapi",
    "msgspec",
    "pyzmq",
    "ray[default]==2.60.0",
    "hydra-core==1.3.8",
    "omegaconf",
    "math-verify==0.9.0",
    "wandb==0.31.0",
    "numpy>=2.0",
    "pandas",
    "pyarrow>=19",
    "transformers>=5.5.3,<5.11,!=5.6.0",
    "tensordict==0.10.0",
    "torchdata==0.11.0",
    "datasets",
    "tokenizers",
]

setup(
    name="verl-heapa",
    version="0.1.0",
    description="Bounded evolving prompt pools, heap boundary sampling and on-policy augmentation for verl",
    long_description=open("README.md", encoding="utf-8").read() if __import__("os").path.exists("README.md") else "",
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    packages=find_packages(include=["verl_ext", "verl_ext.*", "recipe", "recipe.*"]),
    package_data={"recipe.heapa": ["config/*.yaml"], "verl_ext.sim": ["scenarios/*.yaml"]},
    install_requires=INSTALL_REQUIRES,
    extras_require={
        "test": ["pytest>=8", "hypothesis>=6.100", "pytest-asyncio", "pytest-timeout", "matplotlib"],
        "sim": ["matplotlib"],
        # the inference engine verl 0.9.1's own `vllm` extra pins (GPU clusters only)
        "gpu": ["vllm==0.24.0", "torch==2.11.0"],
    },
    entry_points={"verl.plugins": ["heapa = verl_ext.plugin"]},
)
