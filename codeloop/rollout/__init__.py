"""Rollout: multi-turn episodes and their fan-out over runners (stage rollout)."""
