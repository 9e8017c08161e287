"""``SamplingConfig``: how evaluation samples (its own module: the generate step and every back-end read it, and
the back-ends are imported by the generate step only when chosen)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class SamplingConfig:
    """The paper's evaluation sampling (T=0.7, top-p=0.7, 16 samples) unless overridden."""

    n: int = 16
    temperature: float = 0.7
    top_p: float = 0.7
    top_k: int = -1
    max_new_tokens: int = 20480  # the paper-scale response length of the GPU launchers
    seed: int = 0
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.n < 1:
            raise ValueError(f"n (samples per problem) must be >= 1, got {self.n}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)
