"""Subcommands of the `codeloop` console script, one module each.

Each module defines HELP (one line), add_arguments(parser) and run(args) -> exit code.
"""
