"""Evaluation: frozen-set metrics, the promotion gate, iteration history (stage evaluate)."""
