"""verl plugin entry point (group ``verl.plugins``): loaded by ``import verl`` in every verl process.

It registers the CPU backend and the project's reward manager. verl swallows plugin import errors at debug
level, so failures here are also logged at ERROR before re-raising.
"""

import logging

logger = logging.getLogger(__name__)

try:
    from verl_ext.adapters.reward_manager import register as _register_reward
    from verl_ext.cpu import register as _register_cpu

    _register_cpu()
    _register_reward()  # the "heapa" reward manager, needed in the driver and in every reward worker
except ImportError:
    logger.exception("verl_ext plugin failed to register its verl extensions")
    raise
