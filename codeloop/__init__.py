"""codeloop: reinforcement learning for code-writing agents from execution feedback."""

__version__ = "0.1.0"
