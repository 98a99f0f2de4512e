"""The two-wheel shop: a small repository (``shop``) whose code needs ``helperlib``, which
needs ``tinyunits``, both served from a local wheel cache built by hand, with pip kept
off every registry. Tests of mint's environment step, of env specs and of env images
share it."""

from __future__ import annotations

import base64
import hashlib
import os
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests._repo_fixture import write_files

# what pip sees while a test installs: a dead index, no retries, a short timeout, so any
# install comes from the local wheels alone (a registry would hide a bad pin)
OFFLINE_PIP = {"PIP_INDEX_URL": "http://127.0.0.1:9/simple", "PIP_RETRIES": "0",
               "PIP_TIMEOUT": "2"}

SHOP = {
    "pyproject.toml": '[project]\nname = "shop"\nversion = "0.1"\ndependencies = ["helperlib>=1.0", "pytest>=7"]\n',  # noqa: E501
    "shop/__init__.py": "",
    "shop/price.py": "from helperlib import cents\n\n\ndef total(xs):\n    s = 0\n    for x in xs:\n        s += cents(x)\n    return s\n",  # noqa: E501
    "tests/test_price.py": "from shop.price import total\n\n\ndef test_total():\n    assert total([1, 2]) == 300\n\n\ndef test_one():\n    assert total([4]) == 400\n\n\ndef test_empty():\n    assert total([]) == 0\n",  # noqa: E501
}


def make_wheel(cache: Path, name: str, version: str, files: dict[str, str], requires=()) -> Path:
    """A pure-Python wheel built by hand (no build backend, no network)."""
    dist = f"{name}-{version}.dist-info"
    meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    meta += "".join(f"Requires-Dist: {r}\n" for r in requires)
    wheel = (
        "Wheel-Version: 1.0\nGenerator: codeloop-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    )
    entries = {**files, f"{dist}/METADATA": meta, f"{dist}/WHEEL": wheel}
    record = []
    for path, text in entries.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=")
        record.append(f"{path},sha256={digest.decode()},{len(text.encode())}")
    record.append(f"{dist}/RECORD,,")
    cache.mkdir(parents=True, exist_ok=True)
    out = cache / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(out, "w") as z:
        for path, text in {**entries, f"{dist}/RECORD": "\n".join(record) + "\n"}.items():
            z.writestr(path, text)
    return out


def shop_wheels(root: Path) -> Path:
    """root/wheels holding helperlib 1.0 (cents = x * HUNDRED) and tinyunits 0.2 (HUNDRED)."""
    cache = root / "wheels"
    helper = "from tinyunits import HUNDRED\n\n\ndef cents(x):\n    return x * HUNDRED\n"
    make_wheel(cache, "helperlib", "1.0", {"helperlib.py": helper}, ["tinyunits>=0.2"])
    make_wheel(cache, "tinyunits", "0.2", {"tinyunits.py": "HUNDRED = 100\n"})
    return cache


@contextmanager
def offline_pip() -> Iterator[None]:
    """OFFLINE_PIP in os.environ for the block, the old values put back after."""
    old = {k: os.environ.get(k) for k in OFFLINE_PIP}
    os.environ.update(OFFLINE_PIP)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def mint_shop(root: Path, max_tasks: int):
    """The shop minted offline from shop_wheels(root) into root/out (sources at root/shop)."""
    from codeloop.data.repos.mint import MintConfig, mint_repo

    cache = shop_wheels(root)
    with offline_pip():
        return mint_repo(write_files(root / "shop", SHOP), root / "out",
                         MintConfig(max_tasks=max_tasks, workers=2, wheel_cache=str(cache)))
