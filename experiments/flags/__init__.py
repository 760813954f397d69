"""The ``cpgym`` commands' flag declarations: one module per command (``experiments.flags.NAME``,
``add_arguments(parser)``) beside its run module (``experiments.commands.NAME``, ``run(args)``).

The parser (:func:`experiments.cli.build_parser`) imports only these modules, so they import
nothing heavy: no torch, gymnasium, Stable-Baselines3, training code, pandas or matplotlib, and
no simulator (``tests/experiments/test_cli_startup.py``). A command's run module imports its
flags module (constants shared by both live here) and re-exports ``add_arguments``.
"""
