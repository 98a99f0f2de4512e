"""`codeloop params`: validate params.yaml, or list every key with its doc (and the fields of
an entry of the repository list that ``mint.repos_list`` names)."""

from __future__ import annotations

import sys

from codeloop.config import ConfigError, RepoEntry, field_docs, load_params

HELP = "Validate params.yaml (or print every key with its documentation)."


def add_arguments(p) -> None:
    p.add_argument("--file", default="params.yaml", help="params file to check")
    p.add_argument("--doc", action="store_true", help="print every key and its description")


def run(args) -> int:
    if args.doc:
        for key, doc in field_docs().items():
            print(f"{key:32s} {doc}")
        for key, doc in field_docs(RepoEntry, "mint.repos_list[].").items():
            print(f"{key:32s} {doc}")
        return 0
    try:
        load_params(args.file)
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return 2
    print(f"{args.file}: ok")
    return 0
