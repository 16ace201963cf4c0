"""The release version of checkpointd: of this package, the server and the Node.js client.

The one place it is chosen. ``python tools/release.py set X.Y.Z`` writes it here and in every
copy (the server package, its pin of this one, the npm package, the image's label, the
manifests, the docs); tests/packaging/test_release.py fails when a copy differs.
"""

__version__ = "0.1.0"
