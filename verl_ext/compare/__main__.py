"""``python -m verl_ext.compare``: see ``verl_ext.compare.cli``."""

import sys

from verl_ext.compare.cli import main

sys.exit(main())
