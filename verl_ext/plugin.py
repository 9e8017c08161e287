"""verl plugin entry point (group ``verl.plugins``): loaded by ``import verl`` in every verl process.

It registers the CPU backend and the project's reward manager. verl swallows plugin import errors at debug
level, so failures here are also logged at ERROR before re-raising.
"""

import logging

logger = logging.getLogger(__name__)

try:
    from verl_ext.adapters._config import configure_logging
    from verl_ext.cpu import register as _register_cpu

    configure_logging()  # reward and agent-loop workers follow VERL_EXT_LOG_LEVEL too
    _register_cpu()
    # The "heapa" reward manager (driver and every reward worker) registers itself when its module finishes
    # importing; a plain module import also works when that module is what triggered `import verl`.
    import verl_ext.adapters.reward_manager  # noqa: F401
except ImportError:
    logger.exception("verl_ext plugin failed to register its verl extensions")
    raise
