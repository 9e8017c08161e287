"""``python -m verl_ext.gpu_plan``: see ``verl_ext.gpu_plan.cli``."""

import sys

from verl_ext.gpu_plan.cli import main

sys.exit(main())
