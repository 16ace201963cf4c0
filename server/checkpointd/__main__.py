"""``python -m checkpointd`` runs the command line."""

from checkpointd.cli import main

raise SystemExit(main())
