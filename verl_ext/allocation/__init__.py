"""How many responses each prompt gets: one step's budget spread from the pool's estimates (``budget``), or
Reinforce-Ada's rounds until a prompt's exit rule holds (``rounds``)."""

from verl_ext.allocation.budget import AllocationConfig, allocate, mixed_probability, prior_support
from verl_ext.allocation.rounds import RoundsConfig, has_exited, kept_passes

__all__ = ["AllocationConfig", "RoundsConfig", "allocate", "has_exited", "kept_passes", "mixed_probability",
           "prior_support"]
