"""Data: load, validate, dedupe, leak-check, split and bucket tasks (stages clean, bucket)."""
