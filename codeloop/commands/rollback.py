"""`codeloop rollback`: restore code, params, data and models of an earlier iteration."""

from __future__ import annotations

import sys

HELP = "Roll back to an iteration: --to iter-NNNN | --reward-version V | --dataset-version H."


def add_arguments(p) -> None:
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--to", default="", help="tag or commit, e.g. iter-0003")
    g.add_argument("--reward-version", default="", help="newest commit whose reward.version is V")
    g.add_argument("--dataset-version", default="", help="newest iteration on dataset sha256 H")
    p.add_argument("--root", default=".", help="repository root")
    p.add_argument(
        "--no-data", action="store_true", help="restore git files only (no dvc checkout)"
    )


def run(args) -> int:
    from codeloop.ops.rollback import WorkspaceError, find_commit, rollback

    try:
        commit = find_commit(
            args.root,
            to=args.to,
            reward_version=args.reward_version,
            dataset_version=args.dataset_version,
        )
        report = rollback(args.root, commit, checkout_data=not args.no_data)
    except WorkspaceError as exc:
        print(f"rollback: {exc}", file=sys.stderr)
        return 2
    print(report.render())
    print("review with `git status`, then commit to make the rollback the new head")
    return 0
