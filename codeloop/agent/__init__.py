"""Coding-agent episodes on repository tasks: workspaces, tools, and the judge of a final diff."""
