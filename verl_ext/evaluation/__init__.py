"""Benchmark evaluation: avg@k / pass@k per benchmark and overall, JSON results and paper-shaped tables.

The metric, schema, scoring and table modules (``metrics``, ``generations``, ``scoring``, ``report``) are pure
Python + numpy (+ pyarrow to read parquet) and import no torch, verl or vLLM. Generation back-ends are separate
modules imported only when used: ``gen_hf`` (transformers), ``gen_vllm`` (vLLM), ``checkpoint`` (verl's
FSDP merger for checkpoints without HF weights). CLI: ``python -m verl_ext.evaluation`` (``cli``).
"""

from verl_ext.evaluation.metrics import BenchmarkScore, ProblemResult, pass_at_k, score_all, score_benchmark

__all__ = ["BenchmarkScore", "ProblemResult", "pass_at_k", "score_all", "score_benchmark"]
