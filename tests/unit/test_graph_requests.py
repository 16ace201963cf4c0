"""The graph store's request-id rules (C9, C10) decided by :mod:`checkpointd.graph.requests`:
``once`` (look up, apply, record) and ``once_recorded_first`` (record, look up only when an
earlier record is found) give every case the same outcome. The SQL behind them runs in the
contract suites on both backends; here each is driven over a dict standing for the table."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable

import pytest

from checkpointd.fingerprint import SEPARATOR
from checkpointd.graph import requests
from checkpointd.store.base import RequestIdReused

KIND = requests.PUT_WRITES
OTHER_KIND = requests.PUT_CHECKPOINT
ID = "req-1"

Recorded = dict[str, tuple[str, str, str]]
Once = Callable[[Recorded, str, str], Awaitable[tuple[int, int]]]


def _fingerprint(method: str) -> str:
    """A stored fingerprint's shape: the method, then the digest of the request."""
    return f"{method}{SEPARATOR}{'0' * 64}"


async def _once(table: Recorded, kind: str, fingerprint: str) -> tuple[int, int]:
    """``once`` over ``table``: (its reply, how many times it applied)."""
    applied = 0

    async def apply() -> int:
        nonlocal applied
        applied += 1
        return 0

    async def lookup() -> tuple[str, str, str] | None:
        return table.get(ID)

    async def record(kind: str, fingerprint: str, reply_json: str) -> None:
        assert ID not in table, "recorded twice"
        table[ID] = (kind, fingerprint, reply_json)

    reply = await requests.once(ID, kind, fingerprint, apply, lookup=lookup, record=record)
    return reply, applied


async def _recorded_first(table: Recorded, kind: str, fingerprint: str) -> tuple[int, int]:
    """``once_recorded_first`` over ``table``, the same way."""
    applied = 0

    async def apply() -> None:
        nonlocal applied
        applied += 1

    async def reserve(kind: str, fingerprint: str, reply_json: str) -> bool:
        if ID in table:
            return False
        table[ID] = (kind, fingerprint, reply_json)
        return True

    async def lookup() -> tuple[str, str, str] | None:
        return table.get(ID)

    reply = await requests.once_recorded_first(
        ID, kind, fingerprint, 0, apply, reserve=reserve, lookup=lookup
    )
    return reply, applied


BOTH = pytest.mark.parametrize("once", [_once, _recorded_first], ids=["once", "recorded_first"])


@BOTH
async def test_c9_a_new_id_applies_once_and_is_recorded(once: Once) -> None:
    table: Recorded = {}
    fingerprint = _fingerprint("PutGraphWrites")
    assert await once(table, KIND, fingerprint) == (0, 1)
    assert table[ID] == (KIND, fingerprint, json.dumps({"count": 0}))


@BOTH
async def test_c9_a_retry_applies_nothing_and_gets_the_recorded_reply(once: Once) -> None:
    fingerprint = _fingerprint("PutGraphWrites")
    table: Recorded = {ID: (KIND, fingerprint, json.dumps({"count": 0}))}
    assert await once(table, KIND, fingerprint) == (0, 0)


@BOTH
async def test_c10_an_id_recorded_with_another_fingerprint_is_refused_before_applying(
    once: Once,
) -> None:
    table: Recorded = {ID: (OTHER_KIND, _fingerprint("PutGraphCheckpoint"), '{"count": 0}')}
    with pytest.raises(RequestIdReused):
        await once(table, KIND, _fingerprint("PutGraphWrites"))
    assert table[ID][0] == OTHER_KIND  # unchanged


@BOTH
async def test_c9_without_fingerprints_another_kind_applies_and_records_nothing(
    once: Once,
) -> None:
    table: Recorded = {ID: (OTHER_KIND, "", '{"count": 0}')}
    assert await once(table, KIND, "") == (0, 1)
    assert table[ID] == (OTHER_KIND, "", '{"count": 0}')


async def test_an_id_purged_between_its_reserve_and_its_look_up_is_reserved_again() -> None:
    """The reserve found a record that the purge removed before the look-up: the call applies
    and its id is recorded, as for a new id."""
    table: Recorded = {ID: (KIND, "", '{"count": 0}')}
    calls: list[str] = []

    async def reserve(kind: str, fingerprint: str, reply_json: str) -> bool:
        calls.append("reserve")
        if ID in table:
            return False
        table[ID] = (kind, fingerprint, reply_json)
        return True

    async def lookup() -> tuple[str, str, str] | None:
        calls.append("lookup")
        table.clear()  # the purge ran in between
        return None

    async def apply() -> None:
        calls.append("apply")

    assert (
        await requests.once_recorded_first(ID, KIND, "f", 0, apply, reserve=reserve, lookup=lookup)
        == 0
    )
    assert calls == ["reserve", "lookup", "reserve", "apply"]
    assert table[ID] == (KIND, "f", '{"count": 0}')


async def test_without_a_request_id_nothing_is_reserved() -> None:
    applied: list[int] = []

    async def never_reserve(*_: str) -> bool:
        raise AssertionError("no request id: nothing to record")

    async def never_lookup() -> tuple[str, str, str] | None:
        raise AssertionError("no request id: nothing to look up")

    async def apply() -> None:
        applied.append(1)

    reply = await requests.once_recorded_first(
        "", KIND, "", 0, apply, reserve=never_reserve, lookup=never_lookup
    )
    assert reply == 0
    assert applied == [1]
