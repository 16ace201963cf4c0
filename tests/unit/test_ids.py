"""The ids the clients make up (checkpoint ids, request ids, claim tokens): UUID4 text."""

from __future__ import annotations

import uuid

from checkpointd_client._base import new_id


def test_new_id_is_the_text_of_a_random_uuid4():
    """Each id parses as a version 4, RFC 4122 UUID and is its canonical text; none repeats,
    and every digit that is random takes several values."""
    ids = [new_id() for _ in range(2000)]
    for text in ids:
        parsed = uuid.UUID(text)
        assert parsed.version == 4
        assert parsed.variant == uuid.RFC_4122
        assert str(parsed) == text
    assert len(set(ids)) == len(ids)
    variants = {text[19] for text in ids}
    assert variants == set("89ab")
    for position in (0, 9, 15, 20, 35):  # not 14 (the version) nor 19 (the variant)
        assert len({text[position] for text in ids}) > 8
