"""verl-heapa: prompt pools, selection strategies and adaptive rollout for RLVR on verl.

The pure core (``pool``, ``selection``, ``augment``, ``rollout``, ``reward``, ``sim``, ``tasks``) imports no
verl, ray or torch; ``adapters`` and ``cpu`` are the only places that touch verl.
"""

__version__ = "0.1.0"
