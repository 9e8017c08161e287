"""HeaPA's frontier selection, used by the ``boundary`` strategy: the batch rule (``policy.py``), the frontier
draws over the pool's value buckets (``draw.py``) and the exploration rule for the cold share
(``exploration.py``). The pool keeps the storage, the estimators, capacity, lineage and the coverage
measurements the rule reads (``verl_ext/pool/coverage.py``)."""

from verl_ext.selection.frontier.exploration import adaptive_cold_share, cap_revisits, cold_share, greedy_cold_share
from verl_ext.selection.frontier.policy import draw_batch

__all__ = ["adaptive_cold_share", "cap_revisits", "cold_share", "draw_batch", "greedy_cold_share"]
