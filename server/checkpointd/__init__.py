"""checkpointd: a durability sidecar for AI agents, serving checkpoints over gRPC."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("checkpointd")
except PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0.0.0"

__all__ = ["__version__"]
