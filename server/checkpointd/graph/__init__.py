"""Graph threads (LangGraph's checkpoints, writes and pauses) in checkpointd: the parts that
are the same on every backend.

- :mod:`.store`: the ``GraphStore`` protocol, its domain types and the operations both
  backends share; each backend's SQL is ``checkpointd.store.sqlite.graph`` and
  ``checkpointd.store.postgres.graph``.
- :mod:`.interrupts`: graph pauses in the pending-interrupt inbox (G8-G10).
- :mod:`.requests`: request ids and fingerprints of graph calls (C9, C10).
- :mod:`.retention`: the retention rules and the loop that applies them (G12, G13);
  :mod:`.retention_job`: ``--graph-retention`` and the periodic job.
- :mod:`.paging`: ListGraphCheckpoints' page tokens.
- :mod:`.delta`: LangGraph's DeltaChannel: the history walk of GetGraphDeltaHistory (G19)
  and the checkpoints a delete of runs keeps so no chain loses its seed (G20).
- :mod:`.metrics`: the graph store's operation timings.
- :mod:`.checkpoint_summary`: a checkpoint as a person reads it, undecoded (the CLI's
  ``runs show`` and the approvals page's run view).
- :mod:`.value_view`: a stored value as plain JSON, decoded without LangGraph and never
  executed; :mod:`.state_view`: a checkpoint's state and what changed from its parent (the
  run view's).

Nothing is imported here: the backends import these modules, and these import the store's
shared machinery, so the package stays free of import cycles.
"""
