"""nginx's re-sends matched to the attempts they carried, from the history alone."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from harness.balancer import Resend, retries
from tests.unit.histories import History

PODS = {"127.0.0.1:4001": "pod-0", "127.0.0.1:4002": "pod-1"}


def test_a_resend_names_the_attempt_whose_id_it_carried() -> None:
    h = History(intents=3)
    for intent in range(3):
        h.start(intent)
        h.attempt(intent)  # ids 1, 2, 3
    resends = [
        Resend(2, ["127.0.0.1:4001", "127.0.0.1:4002"], ["502", "200"]),
        Resend("probe", ["127.0.0.1:4001", "127.0.0.1:4002"], ["502", "200"]),  # not the driver's
        Resend(3, ["127.0.0.1:4002", "10.0.0.9:80"], ["502", "200"]),
        Resend(99, ["127.0.0.1:4001", "127.0.0.1:4002"], ["502", "200"]),  # no such attempt
    ]
    assert list(retries(resends, h.events, PODS)) == [
        {"intent": 1, "attempt": 1, "id": 2, "upstreams": ["pod-0", "pod-1"], "statuses": ["502", "200"]},
        {
            "intent": 2,
            "attempt": 1,
            "id": 3,
            "upstreams": ["pod-1", "10.0.0.9:80"],
            "statuses": ["502", "200"],
        },
    ]


class Unread:
    """A history that fails the test when read."""

    def __iter__(self) -> Iterator[dict[str, Any]]:
        raise AssertionError("the history was read")


def test_without_a_resend_of_an_attempt_the_history_is_not_read() -> None:
    assert list(retries([Resend("probe", ["a", "b"], ["502", "200"])], Unread(), PODS)) == []
