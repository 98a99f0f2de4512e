"""Prefect flows, one per dvc.yaml stage (`python -m flows.<stage>`), and the nightly run.

Run as a command (``python -m flows.<name>``) with no Prefect server named
(``PREFECT_API_URL`` unset, in the environment and the active profile), a process
attaches to one local server shared by every stage of the run instead of booting
Prefect's temporary server of its own (flows/_server.py says how it starts and stops).
This runs here because the package is imported before any flow module imports Prefect.
Imported as a library (tests, a worker), nothing happens.
"""

import sys

# While `python -m` locates the module, sys.argv[0] is "-m": the stage-command case.
if sys.argv[:1] == ["-m"] and "prefect" not in sys.modules:
    from flows import _server

    if _server.wanted():
        _server.attach()
