"""The reliability suites' name for the direct store reader, which lives in tests/support so
the contract suite can compare whole stores too."""

from tests.support.store_dump import StoreReader

__all__ = ["StoreReader"]
