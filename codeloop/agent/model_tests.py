"""The test files a tdd agent episode writes: where it is asked to, and which files count."""

from __future__ import annotations

MODEL_TEST_PATH = "tests/test_model.py"  # where the tdd prompt asks for the model's tests


def is_model_test(path: str) -> bool:
    """A file the model wrote as its own tests: a test_*.py module."""
    name = path.replace("\\", "/").rsplit("/", 1)[-1]
    return name.startswith("test_") and name.endswith(".py")
