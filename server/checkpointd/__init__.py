"""checkpointd: a durability sidecar for AI agents, serving checkpoints over gRPC."""

# The one place the version is written: pyproject.toml reads it from here. A literal, not
# importlib.metadata, which would cost every server start a scan of the installed packages.
__version__ = "0.1.0"

__all__ = ["__version__"]
