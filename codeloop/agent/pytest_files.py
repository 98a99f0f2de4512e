"""The file names pytest reads as its configuration, taken from the installed pytest itself.

pytest finds its configuration by file name while it walks up from the test paths
(``_pytest/config/findpaths.py``), and a release can add a name (pytest 9 added
``pytest.toml`` and ``.pytest.toml``). A name missing from the protected set is an
``addopts = -p plugin`` the judge would apply, so the set is the union of a fixed floor and
every file-name-like string constant of the installed ``findpaths.py``.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import os
import re

# the names pytest reads at least since 9.0: protected whatever the installed pytest says
FLOOR = frozenset(
    "pytest.ini .pytest.ini pytest.toml .pytest.toml pyproject.toml tox.ini setup.cfg".split()
)
# a bare file name with a config suffix; ".ini" alone (a suffix key) is not one
CONFIG_NAME = re.compile(r"^\.?[A-Za-z0-9_-][\w.-]*\.(ini|toml|cfg)$")


def findpaths_source() -> str | None:
    """The text of the installed pytest's ``_pytest/config/findpaths.py`` (None: no pytest),
    found without importing pytest."""
    spec = importlib.util.find_spec("_pytest")
    if spec is None or not spec.submodule_search_locations:
        return None
    for root in spec.submodule_search_locations:
        path = os.path.join(root, "config", "findpaths.py")
        if os.path.isfile(path):
            with open(path, encoding="utf-8") as fh:
                return fh.read()
    return None


def config_constants(source: str) -> frozenset[str]:
    """Every string constant of ``source`` that looks like a config file name."""
    tree = ast.parse(source)
    return frozenset(
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and CONFIG_NAME.match(node.value)
    )


@functools.cache
def pytest_config_names() -> frozenset[str]:
    """The base names pytest may read as configuration: FLOOR and the installed pytest's."""
    source = findpaths_source()
    return FLOOR | (config_constants(source) if source else frozenset())
