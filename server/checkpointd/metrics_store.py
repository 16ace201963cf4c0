"""Store timing: :class:`InstrumentedStore` stands in front of a store and times its calls.

Each store operation is observed in ``checkpointd_store_operation_seconds`` by operation (the
method's name) and outcome: ``ok``, ``unavailable`` (:class:`StoreUnavailable`) or ``error``
(anything else raised). ``open`` and ``close`` are passed on untimed; so are the methods that
are not coroutines (``fenced`` spans the write it guards, which is timed on its own).

The methods are made from :class:`Store`'s public methods (its own and those of the shared
classes it is made of), as :mod:`checkpointd.graph.metrics` times the graph store: an
operation added to :class:`Store` is timed without a line here. They are real class attributes
(not a runtime ``__getattr__``), so no operation can fall through untimed; the class is
registered as a virtual subclass of :class:`Store`, so an instance is a :class:`Store` to
``isinstance`` without inheriting the shared implementations it passes on.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Final, TypeVar, cast

from prometheus_client import Histogram

from checkpointd.metrics import LabelCache
from checkpointd.store.base import StoreUnavailable
from checkpointd.store.interface import Store

__all__ = ["InstrumentedStore", "observed", "timed_store"]

T = TypeVar("T")

#: Coroutine methods passed on untimed: opening and closing are not store operations.
_UNTIMED: Final = frozenset({"open", "close"})


class InstrumentedStore:
    """A :class:`Store` that delegates every call to ``store`` and times each operation in
    ``histogram`` (labelled ``operation``, ``outcome``)."""

    if TYPE_CHECKING:
        # The type checker's view of the methods :func:`_delegate_every_operation` makes.
        def __getattr__(self, name: str) -> Any: ...

    def __init__(self, store: Store, histogram: Histogram) -> None:
        self._store = store
        self._histogram = histogram

    @property
    def inner(self) -> Store:
        """The store being timed."""
        return self._store

    async def _timed(self, operation: str, call: Awaitable[T]) -> T:
        return await observed(self._histogram, operation, call)


def timed_store(store: Store, histogram: Histogram) -> Store:
    """``store`` behind an :class:`InstrumentedStore`, typed as the :class:`Store` it is
    registered as (a type checker does not follow ``Store.register``)."""
    return cast(Store, InstrumentedStore(store, histogram))


async def observed(histogram: Histogram, operation: str, call: Awaitable[T]) -> T:
    """Await ``call``, observing its time in ``histogram`` by operation and outcome."""
    started = time.perf_counter()
    outcome = "error"
    try:
        result = await call
        outcome = "ok"
        return result
    except StoreUnavailable:
        outcome = "unavailable"
        raise
    finally:
        _series(histogram)(operation, outcome).observe(time.perf_counter() - started)


#: Each store-time histogram's series cache (one histogram per server, a few in tests).
_SERIES: dict[Histogram, LabelCache[Histogram]] = {}


def _series(histogram: Histogram) -> LabelCache[Histogram]:
    cache = _SERIES.get(histogram)
    if cache is None:
        cache = _SERIES[histogram] = LabelCache(histogram)
    return cache


def _timed_method(name: str) -> Callable[..., Awaitable[Any]]:
    async def timed(self: InstrumentedStore, *args: Any, **kwargs: Any) -> Any:
        return await self._timed(name, getattr(self.inner, name)(*args, **kwargs))

    return timed


def _untimed_coroutine(name: str) -> Callable[..., Awaitable[Any]]:
    async def untimed(self: InstrumentedStore, *args: Any, **kwargs: Any) -> Any:
        return await getattr(self.inner, name)(*args, **kwargs)

    return untimed


def _passed_on(name: str) -> Callable[..., Any]:
    def passed(self: InstrumentedStore, *args: Any, **kwargs: Any) -> Any:
        return getattr(self.inner, name)(*args, **kwargs)

    return passed


def _delegate_every_operation() -> None:
    # dir() walks the MRO: Store's abstract operations and its shared classes' methods.
    for name in dir(Store):
        member = getattr(Store, name)
        if name.startswith("_") or not callable(member):
            continue
        if not inspect.iscoroutinefunction(member):
            method = _passed_on(name)
        elif name in _UNTIMED:
            method = _untimed_coroutine(name)
        else:
            method = _timed_method(name)
        method.__name__ = name
        method.__qualname__ = f"InstrumentedStore.{name}"
        method.__doc__ = member.__doc__
        setattr(InstrumentedStore, name, method)


_delegate_every_operation()
Store.register(InstrumentedStore)
