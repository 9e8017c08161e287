"""GPU memory estimator for the launchers' runs, without a GPU: ``python -m verl_ext.gpu_plan`` (see ``cli``).

``shape`` reads a model's ``config.json``, ``run_config`` the composed launcher config, ``estimate`` holds every
formula (its docstring states them and their assumptions), ``cli`` prints the table. docs/gpu_memory.md explains
the figures.
"""
