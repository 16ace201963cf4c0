"""LangGraph's DeltaChannel on the server: the history walk of GetGraphDeltaHistory (G19) and
the checkpoints a delete of runs must keep so no chain loses its way back to a seed (G20),
written once over the small read interface both backends give (:class:`DeltaReads`).

A DeltaChannel stores its value only now and then (a ``_DeltaSnapshot`` every
``snapshot_frequency`` updates); in between its version names an ``"empty"`` value, and
LangGraph rebuilds it from the writes of the checkpoint's ancestors back to the nearest one
whose version names a stored value (the seed). ``BaseCheckpointSaver``'s walk reads one
ancestor per call; here a page of ancestors is a few statements in one read: the chain in
chunks that double (32, 64, ...) until every channel has its seed, the types of the values
its versions name, the writes, the seeds. The records are :mod:`checkpointd.graph.records`'.
"""

from __future__ import annotations

import abc
from collections.abc import Iterable, Mapping, Sequence
from typing import Final

from checkpointd.errors import InvalidPageToken
from checkpointd.graph.records import (
    ChainLink,
    ChannelValue,
    DeltaAncestor,
    DeltaCursor,
    DeltaPage,
    GraphWrite,
    TypedValue,
)
from checkpointd.paging import decode_json_token, digest, encode_json_token

__all__ = [
    "EMPTY",
    "ChainLink",
    "DeltaAncestor",
    "DeltaCursor",
    "DeltaPage",
    "DeltaReads",
    "decode_cursor",
    "encode_cursor",
    "history",
    "needed_by_survivors",
    "walk_page",
]

#: The type of the value a version names when the channel has none (the savers write it).
EMPTY: Final = "empty"
_VERSION: Final = 1
#: The ancestors a walk reads first; each further read of the chain doubles it.
_FIRST_CHUNK: Final = 32
#: A token names two checkpoint ids (128 characters each) and up to 100 channel positions.
_MAX_TOKEN_LENGTH: Final = 4_000

ChannelKey = tuple[str, str]
"""A stored value's (channel, version)."""


class DeltaReads(abc.ABC):
    """The reads of the walk on one backend connection, in one thread and checkpoint_ns."""

    @abc.abstractmethod
    async def newest(self) -> str | None:
        """The id of the newest checkpoint; None when there is none."""

    @abc.abstractmethod
    async def chain(self, start: str, limit: int) -> list[ChainLink]:
        """``start`` and its ancestors, nearest first, at most ``limit``: the chain follows
        each parent the thread has whose id is less than its child's (so it always ends)."""

    @abc.abstractmethod
    async def stored_types(self, keys: Sequence[ChannelKey]) -> dict[ChannelKey, str]:
        """The type of the stored value of each key that has one."""

    @abc.abstractmethod
    async def values(self, keys: Sequence[ChannelKey]) -> dict[ChannelKey, TypedValue]:
        """The stored value of each key that has one."""

    @abc.abstractmethod
    async def writes(
        self, checkpoint_ids: Sequence[str], channels: Sequence[str]
    ) -> list[tuple[str, GraphWrite]]:
        """The pending writes to ``channels`` at these checkpoints, each with its checkpoint
        id, in writes_sort_key order within a checkpoint (task_path, task_id, idx)."""

    @abc.abstractmethod
    async def links(self) -> list[ChainLink]:
        """Every checkpoint (for the delete of runs)."""

    @abc.abstractmethod
    async def delta_channels(self) -> set[str]:
        """The channels a checkpoint's metadata counts as DeltaChannels
        (``counters_since_delta_snapshot``'s keys)."""


def _seeded(link: ChainLink, channels: Iterable[str], types: Mapping[ChannelKey, str]) -> list[str]:
    """The channels whose version at ``link`` names a stored value that is not empty."""
    found = []
    for channel in channels:
        version = link.channel_versions.get(channel)
        if version is not None and types.get((channel, version), EMPTY) != EMPTY:
            found.append(channel)
    return found


async def _types_along(
    reads: DeltaReads, links: Sequence[ChainLink], channels: Iterable[str]
) -> dict[ChannelKey, str]:
    keys = {
        (channel, link.channel_versions[channel])
        for link in links
        for channel in channels
        if channel in link.channel_versions
    }
    return await reads.stored_types(sorted(keys)) if keys else {}


async def first_cursor(
    reads: DeltaReads, checkpoint_id: str, channels: Sequence[str]
) -> DeltaCursor | None:
    """Where the walk of ``checkpoint_id`` (the newest when empty) starts: at its parent.
    None when the checkpoint is not there or has no parent to walk."""
    target = checkpoint_id or await reads.newest()
    if target is None:
        return None
    found = await reads.chain(target, 2)
    if len(found) < 2 or found[0].checkpoint_id != target:
        return None
    return DeltaCursor(target, found[1].checkpoint_id, tuple(channels))


async def walk_page(
    reads: DeltaReads, cursor: DeltaCursor, *, limit: int, max_bytes: int | None
) -> DeltaPage:
    """Up to ``limit`` ancestors from ``cursor``, nearest first, and where the walk goes on;
    the page stops once it holds more than ``max_bytes`` (one ancestor at least).

    At each ancestor: its writes to the channels still walked, then every such channel whose
    version there names a stored value that is not empty ends with that value as its seed
    (``BaseCheckpointSaver.get_delta_channel_history``'s order)."""
    plan: list[tuple[ChainLink, tuple[str, ...], list[str]]] = []
    walking = list(cursor.walking)
    following: str | None = cursor.checkpoint_id
    chunk = _FIRST_CHUNK
    # The chain in growing chunks, so a walk that ends near its start reads little of it.
    while walking and following is not None and len(plan) < limit:
        want = min(chunk, limit - len(plan))
        links = await reads.chain(following, want + 1)
        following = links[want].checkpoint_id if len(links) > want else None
        visible = links[:want]
        types = await _types_along(reads, visible, walking)
        for link in visible:
            if not walking:
                break
            ends = _seeded(link, walking, types)
            plan.append((link, tuple(walking), ends))
            walking = [channel for channel in walking if channel not in ends]
        chunk *= 2
    if not plan:
        return DeltaPage([], None, cursor.target_id)
    ids = [link.checkpoint_id for link, _, _ in plan]
    by_checkpoint: dict[str, list[GraphWrite]] = {}
    for checkpoint_id, write in await reads.writes(ids, cursor.walking):
        by_checkpoint.setdefault(checkpoint_id, []).append(write)
    seed_keys = [(ch, link.channel_versions[ch]) for link, _, ends in plan for ch in ends]
    seeds = await reads.values(seed_keys) if seed_keys else {}
    ancestors: list[DeltaAncestor] = []
    size = 0
    for link, before, ends in plan:
        if max_bytes is not None and ancestors and size > max_bytes:
            resume = DeltaCursor(cursor.target_id, link.checkpoint_id, before)
            return DeltaPage(ancestors, resume, cursor.target_id)
        kept = set(before)
        ancestor = DeltaAncestor(
            link.checkpoint_id,
            before,
            tuple(w for w in by_checkpoint.get(link.checkpoint_id, ()) if w.channel in kept),
            tuple(
                ChannelValue(ch, link.channel_versions[ch], value)
                for ch in ends
                if (value := seeds.get((ch, link.channel_versions[ch]))) is not None
            ),
        )
        ancestors.append(ancestor)
        size += ancestor.size()
    if walking and following is not None:
        resume = DeltaCursor(cursor.target_id, following, tuple(walking))
        return DeltaPage(ancestors, resume, cursor.target_id)
    return DeltaPage(ancestors, None, cursor.target_id)


async def history(
    reads: DeltaReads,
    checkpoint_id: str,
    channels: Sequence[str],
    *,
    cursor: DeltaCursor | None,
    limit: int,
    max_bytes: int | None,
) -> DeltaPage:
    """One page of the walk of ``checkpoint_id`` (the newest when empty) for ``channels``:
    the first from the checkpoint's parent, or the one ``cursor`` resumes."""
    start = cursor or await first_cursor(reads, checkpoint_id, channels)
    if start is None:
        return DeltaPage([], None)
    return await walk_page(reads, start, limit=limit, max_bytes=max_bytes)


def encode_cursor(cursor: DeltaCursor, channels: Sequence[str], scope: tuple[object, ...]) -> str:
    """A token that resumes the walk at ``cursor`` for the request identified by ``scope``
    (the channels still walked as their positions in the request's ``channels``)."""
    positions = [channels.index(channel) for channel in cursor.walking]
    payload = [_VERSION, cursor.target_id, cursor.checkpoint_id, positions, digest(scope)]
    return encode_json_token(payload)


def decode_cursor(
    token: str, channels: Sequence[str], scope: tuple[object, ...]
) -> DeltaCursor | None:
    """The cursor a token resumes at; None for the empty (first-page) token."""
    if not token:
        return None
    payload = decode_json_token(token, _MAX_TOKEN_LENGTH)
    if (
        not isinstance(payload, list)
        or len(payload) != 5
        or payload[0] != _VERSION
        or not isinstance(payload[1], str)
        or not isinstance(payload[2], str)
        or not isinstance(payload[3], list)
        or not all(type(p) is int and 0 <= p < len(channels) for p in payload[3])
        or payload[4] != digest(scope)
    ):
        raise InvalidPageToken()
    return DeltaCursor(payload[1], payload[2], tuple(channels[p] for p in payload[3]))


async def needed_by_survivors(reads: DeltaReads, doomed: set[str]) -> set[str]:
    """Of the ``doomed`` checkpoints, those a surviving checkpoint's DeltaChannel history
    walks through: on its parent chain before every DeltaChannel it holds no value for has
    found its seed (the seed's checkpoint included). Deleting them would rebuild that
    channel from a shortened history, silently (G20)."""
    channels = await reads.delta_channels()
    if not channels or not doomed:
        return set()
    links = {link.checkpoint_id: link for link in await reads.links()}
    types = await _types_along(reads, list(links.values()), channels)
    needed: set[str] = set()
    for link in links.values():
        if link.checkpoint_id in doomed:
            continue
        walking = [ch for ch in channels if ch not in _seeded(link, channels, types)]
        child, current = link, links.get(link.parent_checkpoint_id)
        while walking and current is not None and current.checkpoint_id < child.checkpoint_id:
            if current.checkpoint_id in doomed:
                needed.add(current.checkpoint_id)
            ends = _seeded(current, walking, types)
            walking = [ch for ch in walking if ch not in ends]
            child, current = current, links.get(current.parent_checkpoint_id)
    return needed
