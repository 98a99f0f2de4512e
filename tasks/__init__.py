"""Thin Prefect @task wrappers around library calls (steps, artifacts, dvc pull/push/repro)."""
