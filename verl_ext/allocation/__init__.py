"""How many responses each prompt gets: one step's budget spread from the pool's estimates (``budget``), or
Reinforce-Ada's rounds until a prompt's exit rule holds (``rounds``)."""

from verl_ext.allocation.budget import AllocationConfig, Allocator, allocate, mixed_probability, prior_support
from verl_ext.allocation.rounds import RoundsConfig, RoundsPlanner, baseline, has_exited, keep_indices, kept_passes, \
    planned_total

__all__ = ["AllocationConfig", "Allocator", "RoundsConfig", "RoundsPlanner", "allocate", "baseline", "has_exited", "keep_indices",
           "kept_passes", "mixed_probability", "planned_total", "prior_support"]
