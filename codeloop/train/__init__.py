"""Training: GRPO loss, the updater, multi-process training (stage train)."""
