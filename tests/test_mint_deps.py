"""Mint's environment step: a repository's declared dependencies are pip-installed once (from
a wheel cache, offline) into the env dir its sealed pytest runs import them from."""

from __future__ import annotations

import pytest

from codeloop.data.repos.mint import MintConfig, mint_repo
from codeloop.data.repos.repo_deps import DepsError, declared_requirements
from codeloop.io import read_json
from tests._repo_fixture import write_files
from tests._wheel_shop import SHOP, mint_shop, offline_pip


@pytest.fixture
def offline():
    # any registry access would fail: what installs, installs from the cache alone
    with offline_pip():
        yield


@pytest.fixture(scope="module")
def shop(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("deps")
    return tmp, mint_shop(tmp, max_tasks=3)


def test_declared_dependencies_are_read_from_every_packaging_file(tmp_path):
    write_files(tmp_path, {
        "pyproject.toml": '[project]\nname = "x"\ndependencies = ["attrs>=22", "pytest"]\n',
        "setup.cfg": "[options]\ninstall_requires =\n    six\n    idna==3.4\n",
        "setup.py": "from setuptools import setup\nREQ = ['toolz; python_version>\"3\"']\nsetup(name='x', install_requires=REQ)\n",  # noqa: E501
        "requirements-test.txt": "# tests\n-r requirements.txt\nhypothesis  # props\npluggy\n",
    })
    assert declared_requirements(tmp_path) == [
        "attrs>=22", "six", "idna==3.4", 'toolz; python_version>"3"', "hypothesis"
    ]


def test_a_repository_s_test_extras_are_declared_dependencies_too(tmp_path):
    write_files(tmp_path, {
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

    write_files(tmp_path, files)
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
    src = write_files(tmp_path / "shop", SHOP)
    with pytest.raises(DepsError, match="helperlib"):
        mint_repo(src, tmp_path / "out", MintConfig(max_tasks=1, workers=1,
                                                     wheel_cache=str(tmp_path / "empty")))


def test_the_cli_exits_3_when_dependencies_cannot_be_installed(tmp_path, offline, capsys):
    from codeloop.cli import main

    src = write_files(tmp_path / "shop", SHOP)
    rc = main(["mint", "--repo", str(src), "--out", str(tmp_path / "out"), "--max", "1",
               "--wheel-cache", str(tmp_path / "empty")])
    assert rc == 3 and "DepsError" in capsys.readouterr().err
