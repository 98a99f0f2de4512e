"""The policy: model load/generate/save, prompt templates, SFT (stages policy_init, sft)."""
