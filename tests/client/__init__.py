"""Unit tests of the Python client (no checkpointd server needed)."""
