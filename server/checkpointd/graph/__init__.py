"""Graph threads (LangGraph's checkpoints, writes and pauses) in checkpointd: the parts that
are the same on every backend.

- :mod:`.store`: ``GraphStore``, the base class of both backends' graph stores, with what is
  the same on both written once over the statement interface: the request-id transaction,
  the puts, every whole-thread write, a get, a listing's paging and the DeltaChannel walk;
  :mod:`.store_sql`: the SQL text a backend gives it and the rows it binds and reads;
  :mod:`.records`: the records. Each backend's own part is ``checkpointd.store.sqlite.graph`` and
  ``checkpointd.store.postgres.graph``.
- :mod:`.interrupts`: graph pauses in the pending-interrupt inbox (G8-G10);
  :mod:`.pending_ops`: their statements, the same on both backends over the statement
  interface, each backend giving its SQL.
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
