"""Job ids are UUIDv7 and increase, within one millisecond too (docs/protocol.md §5).
"""

import time
import uuid

from conftest import ID
from hopper_client._uuid7 import Uuid7Generator, uuid7
from hopper_client.client import _job_spec


def test_ids_are_version_7_with_the_current_time():
    before = time.time_ns() // 1_000_000
    made = uuid.UUID(uuid7())
    after = time.time_ns() // 1_000_000
    assert made.version == 7
    assert made.variant == uuid.RFC_4122
    assert before <= made.int >> 80 <= after


def test_ids_made_in_the_same_millisecond_increase():
    same_ms = Uuid7Generator(clock=lambda: 1_600_000_000_000)
    ids = [same_ms() for _ in range(10_000)]
    assert all(ID.match(i) for i in ids)
    assert ids == sorted(ids)
    assert len(set(ids)) == len(ids)
    assert {uuid.UUID(i).int >> 80 for i in ids} == {1_600_000_000_000}


def test_ids_increase_when_the_clock_steps_back():
    now = [1_650_000_000_000]
    make = Uuid7Generator(clock=lambda: now[0])
    first = make()
    now[0] -= 1_000
    later = [make() for _ in range(100)]
    assert [first] + later == sorted([first] + later)


def test_ids_carry_into_the_next_millisecond_when_the_counter_is_full():
    make = Uuid7Generator(clock=lambda: 1_600_000_000_000)
    make._last_ms, make._last_random = 1_600_000_000_000, (1 << 74) - 3
    ids = [make() for _ in range(3)]
    assert ids == sorted(ids)
    assert [uuid.UUID(i).int >> 80 for i in ids] == [1_600_000_000_000] * 2 + [1_600_000_000_001]


def test_a_batch_gets_increasing_ids_in_submission_order():
    specs = [_job_spec("k", {"n": n}) for n in range(1_000)]
    ids = [s["id"] for s in specs]
    assert ids == sorted(ids)
    assert all(uuid.UUID(i).version == 7 for i in ids)
