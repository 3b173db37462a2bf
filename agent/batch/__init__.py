"""Batch runs: the driver, the local and Ray schedulers, the workspace service for remote runs, the run log and the report (docs/batch.md)."""
