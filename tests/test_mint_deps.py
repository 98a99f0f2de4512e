"""Mint's environment step: a repository's declared dependencies are pip-installed once (from
a wheel cache, offline) into the env dir its sealed pytest runs import them from."""

from __future__ import annotations

import base64
import hashlib
import zipfile
from pathlib import Path

import pytest

from codeloop.data.repos.mint import MintConfig, mint_repo
from codeloop.data.repos.repo_deps import DepsError, declared_requirements
from codeloop.io import read_json


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


SHOP = {
    "pyproject.toml": '[project]\nname = "shop"\nversion = "0.1"\ndependencies = ["helperlib>=1.0", "pytest>=7"]\n',  # noqa: E501
    "shop/__init__.py": "",
    "shop/price.py": "from helperlib import cents\n\n\ndef total(xs):\n    s = 0\n    for x in xs:\n        s += cents(x)\n    return s\n",  # noqa: E501
    "tests/test_price.py": "from shop.price import total\n\n\ndef test_total():\n    assert total([1, 2]) == 300\n\n\ndef test_one():\n    assert total([4]) == 400\n\n\ndef test_empty():\n    assert total([]) == 0\n",  # noqa: E501
}


def _write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


@pytest.fixture
def offline(monkeypatch):
    # any registry access would fail: what installs, installs from the cache alone
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
    monkeypatch.setenv("PIP_RETRIES", "0")
    monkeypatch.setenv("PIP_TIMEOUT", "2")


@pytest.fixture(scope="module")
def shop(tmp_path_factory):
    import os

    tmp = tmp_path_factory.mktemp("deps")
    cache = tmp / "wheels"
    make_wheel(
        cache,
        "helperlib",
        "1.0",
        {
            "helperlib.py": "from tinyunits import HUNDRED\n\n\ndef cents(x):\n    return x * HUNDRED\n"
        },
        ["tinyunits>=0.2"],
    )  # noqa: E501
    make_wheel(cache, "tinyunits", "0.2", {"tinyunits.py": "HUNDRED = 100\n"})
    old = {k: os.environ.get(k) for k in ("PIP_INDEX_URL", "PIP_RETRIES")}
    os.environ.update(PIP_INDEX_URL="http://127.0.0.1:9/simple", PIP_RETRIES="0")
    try:
        res = mint_repo(_write(tmp / "shop", SHOP), tmp / "out",
                        MintConfig(max_tasks=3, workers=2, wheel_cache=str(cache)))
    finally:
        for k, v in old.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
    return tmp, res


def test_declared_dependencies_are_read_from_every_packaging_file(tmp_path):
    _write(tmp_path, {
        "pyproject.toml": '[project]\nname = "x"\ndependencies = ["attrs>=22", "pytest"]\n',
        "setup.cfg": "[options]\ninstall_requires =\n    six\n    idna==3.4\n",
        "setup.py": "from setuptools import setup\nREQ = ['toolz; python_version>\"3\"']\nsetup(name='x', install_requires=REQ)\n",  # noqa: E501
        "requirements-test.txt": "# tests\n-r requirements.txt\nhypothesis  # props\npluggy\n",
    })
    assert declared_requirements(tmp_path) == [
        "attrs>=22", "six", "idna==3.4", 'toolz; python_version>"3"', "hypothesis"
    ]


def test_a_repository_s_test_extras_are_declared_dependencies_too(tmp_path):
    _write(tmp_path, {
        "pyproject.toml": '[project]\nname = "x"\ndependencies = ["attrs"]\n'
                          '[project.optional-dependencies]\ntest = ["hypothesis"]\ndocs = ["sphinx"]\n',
        "setup.cfg": "[options.extras_require]\ntesting =\n    toolz\n",
        "setup.py": "from setuptools import setup\nsetup(name='x', extras_require={'tests': ['six']})\n",
    })
    assert declared_requirements(tmp_path) == ["attrs", "hypothesis", "toolz", "six"]


@pytest.mark.parametrize("files", [
    {"pyproject.toml": '[project]\nname = "x"\nrequires-python = ">=3.8,<3.10"\n'},
    {"setup.cfg": "[options]\npython_requires = >=3.8,<3.10\n"},
    {"setup.py": "from setuptools import setup\nsetup(name='x', python_requires='>=3.8,<3.10')\n"},
])
def test_the_python_a_repository_requires_is_read_from_its_packaging_file(tmp_path, files):
    from codeloop.data.repos.envspec import python_needed
    from codeloop.data.repos.repo_deps import requires_python

    _write(tmp_path, files)
    assert requires_python(tmp_path) == ">=3.8,<3.10"
    assert python_needed(requires_python(tmp_path), "3.11") == "3.9"


def test_the_env_holds_the_dependency_and_its_own_dependency(shop):
    tmp, res = shop
    env = res.tasks[0].environment
    assert len(env) == 64 and {t.environment for t in res.tasks} == {env}  # the spec's hash
    assert (tmp / "out" / "envs" / env / "helperlib.py").is_file()
    assert (tmp / "out" / "envs" / env / "tinyunits.py").is_file()


def test_the_manifest_records_the_pinned_resolution(shop):
    tmp, _ = shop
    env = read_json(tmp / "out" / "manifest.json")["environment"]
    assert env["requirements"] == ["helperlib>=1.0"]  # pytest comes from the sandbox
    assert env["resolved"] == ["helperlib==1.0", "tinyunits==0.2"] and env["from"] == "pip"


def test_the_mutations_tests_import_the_dependency_inside_the_sandbox(shop):
    # without the env the suite does not even collect (ModuleNotFoundError: helperlib), so a
    # kept task is one whose tests imported it in the sealed run and failed on the bug
    _, res = shop
    assert res.tasks and all(t.fail_to_pass for t in res.tasks)
    assert res.report["tests"]["stable"] == 3


def test_a_dependency_the_cache_and_registry_lack_is_an_error_naming_it(tmp_path, offline):
    src = _write(tmp_path / "shop", SHOP)
    with pytest.raises(DepsError, match="helperlib"):
        mint_repo(src, tmp_path / "out", MintConfig(max_tasks=1, workers=1,
                                                     wheel_cache=str(tmp_path / "empty")))


def test_the_cli_exits_3_when_dependencies_cannot_be_installed(tmp_path, offline, capsys):
    from codeloop.cli import main

    src = _write(tmp_path / "shop", SHOP)
    rc = main(["mint", "--repo", str(src), "--out", str(tmp_path / "out"), "--max", "1",
               "--wheel-cache", str(tmp_path / "empty")])
    assert rc == 3 and "DepsError" in capsys.readouterr().err
