"""checkpointd: a durability sidecar for AI agents, serving checkpoints over gRPC."""

# A copy of checkpointd_client/_version.py's, written by tools/release.py (and checked by
# tests/packaging/test_release.py); pyproject.toml reads it from here. A literal, not
# importlib.metadata, which would cost every server start a scan of the installed packages.
__version__ = "0.1.0"

__all__ = ["__version__"]
