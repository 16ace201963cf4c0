"""Graph store timing: one generic wrapper instead of a copy of each signature.

:func:`timed_graph_store` puts a :class:`TimedGraphStore` in front of a graph store: every
coroutine method is observed in ``checkpointd_store_operation_seconds`` as operation
``graph_<name>``, with the outcome ``ok``, ``unavailable`` or ``error`` as
:class:`~checkpointd.metrics_store.InstrumentedStore` labels them.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable
from typing import Any, cast

from prometheus_client import Histogram

from checkpointd.graph.store import GraphStore
from checkpointd.metrics_store import observed

__all__ = ["TimedGraphStore", "timed_graph_store"]


class TimedGraphStore:
    """Delegates every attribute to ``inner``; its coroutine methods come back timed."""

    def __init__(self, inner: GraphStore, histogram: Histogram) -> None:
        self._inner = inner
        self._histogram = histogram

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._inner, name)
        if not inspect.iscoroutinefunction(method):
            return method
        return self._timed(f"graph_{name}", method)

    def _timed(
        self, operation: str, method: Callable[..., Awaitable[Any]]
    ) -> Callable[..., Awaitable[Any]]:
        histogram = self._histogram

        @functools.wraps(method)
        async def timed(*args: Any, **kwargs: Any) -> Any:
            return await observed(histogram, operation, method(*args, **kwargs))

        return timed


def timed_graph_store(inner: GraphStore, histogram: Histogram) -> GraphStore:
    """``inner`` with each of its calls timed in ``histogram``."""
    return cast(GraphStore, TimedGraphStore(inner, histogram))
