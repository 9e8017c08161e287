"""``python -m verl_ext.evaluation``: see ``verl_ext.evaluation.cli``."""

import sys

from verl_ext.evaluation.cli import main

sys.exit(main())
