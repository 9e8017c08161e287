"""Responses per prompt from the pool's estimates: one step's response budget spread over its selected prompts."""

from verl_ext.allocation.budget import AllocationConfig, allocate, mixed_probability, prior_support

__all__ = ["AllocationConfig", "allocate", "mixed_probability", "prior_support"]
