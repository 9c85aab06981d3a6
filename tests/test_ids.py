"""Generated ids are RFC 4122 version-4 UUID text, unique."""

import uuid

from relaykit._types import new_id


def test_new_id_is_a_uuid4() -> None:
    ids = [new_id() for _ in range(2000)]
    assert len(set(ids)) == len(ids)
    for text in ids:
        parsed = uuid.UUID(text)
        assert parsed.version == 4
        assert parsed.variant == uuid.RFC_4122
        assert str(parsed) == text
