"""Generated ids are RFC 4122 version-4 UUID text, unique."""

import uuid

from relaykit._ids import new_id


def test_new_id_is_a_uuid4() -> None:
    ids = [new_id() for _ in range(2000)]
    assert len(set(ids)) == len(ids)
    for text in ids:
        parsed = uuid.UUID(text)
        assert parsed.version == 4
        assert parsed.variant == uuid.RFC_4122
        assert str(parsed) == text


def test_ids_are_unique_across_threads() -> None:
    import threading

    from relaykit import _ids

    _ids._READY.clear()
    results: list[list[str]] = [[] for _ in range(8)]

    def make(out: list[str]) -> None:
        out.extend(new_id() for _ in range(3000))

    threads = [threading.Thread(target=make, args=(out,)) for out in results]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    ids = [i for out in results for i in out]
    assert len(ids) == 8 * 3000
    assert len(set(ids)) == len(ids)


def test_a_forked_child_does_not_reuse_the_parents_random_values() -> None:
    import os

    import pytest

    if not hasattr(os, "fork"):
        pytest.skip("no fork")
    new_id()  # the pool now holds values
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            os.write(write, ",".join(new_id() for _ in range(10)).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        child = pipe.read().decode().split(",")
    os.waitpid(pid, 0)
    parent = [new_id() for _ in range(10)]
    assert len(child) == 10
    assert not set(child) & set(parent)
