"""The coding agent's environment: sealed repository workspaces, tools, tests.

``env`` (AgentEnv, Episode; the executor from ``executor.open_executor``) over ``tools`` (the action space, file
tools through ``fsops``), ``workspace`` (bases and per-episode copies), ``patches`` (diffs,
``git apply``, ``is_test_path``), ``testrun`` (run_pytest in the sandbox, outcomes from
``pytest_plugin``) and ``envs`` (read-only test environment dirs). ``judge`` scores a final
diff (``judge_boot`` its pytest entry in the sandbox, ``channel`` the host's count of the
records, ``hacks`` the static flags).
"""
