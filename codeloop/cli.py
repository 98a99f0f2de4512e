"""The `codeloop` console script: a thin dispatcher over codeloop.commands.*."""

from __future__ import annotations

import argparse
import importlib
import sys

# name -> module under codeloop.commands; imported lazily so `codeloop exec` does not
# pay for torch when it never needs it.
COMMANDS = {
    "params": "params",
    "dvc-deps": "dvc_deps",
    "exec": "exec_cmd",
    "clean": "clean",
    "mint": "mint",
    "replay": "replay",
    "critic": "critic",
    "preflight": "preflight",
    "doctor": "doctor",
    "rollback": "rollback",
    "report": "report",
    "archive": "archive",
    "model-tests": "model_tests",
    "export": "export",
    "env": "env_cmd",
}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="codeloop", description=__doc__)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    modules = {}
    # a named command needs only its own module: `codeloop exec` then skips the others'
    # imports (pyarrow, numpy); no or an unknown command lists them all
    chosen = {argv[0]: COMMANDS[argv[0]]} if argv and argv[0] in COMMANDS else COMMANDS
    for name, mod_name in chosen.items():
        mod = importlib.import_module(f"codeloop.commands.{mod_name}")
        modules[name] = mod
        mod.add_arguments(sub.add_parser(name, help=mod.HELP, description=mod.HELP))
    args = parser.parse_args(argv)
    if not args.command:
        parser.print_help()
        return 2
    return int(modules[args.command].run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
