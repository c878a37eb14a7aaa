"""What the client answers a server that asks (harness/client/host.py): pure, one case per request."""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Any

import pytest

from harness.client.host import Declined, Host

FORM: dict[str, Any] = {
    "message": "Go on?",
    "requestedSchema": {
        "type": "object",
        "properties": {
            "name": {"type": "string", "default": "John Doe"},
            "age": {"type": "integer", "default": 30},
            "note": {"type": "string"},
        },
        "required": ["name"],
    },
}


def test_roots_are_the_data_directory_as_file_uris() -> None:
    host = Host(roots=(PurePosixPath("/runs/r1/data"),))
    assert host.answer("roots/list", {}) == {"roots": [{"uri": "file:///runs/r1/data", "name": "data"}]}
    assert Host().answer("roots/list", {}) == {"roots": []}  # a url target: declared, answered, empty


def test_a_form_is_accepted_with_its_defaults() -> None:
    assert Host().answer("elicitation/create", FORM) == {
        "action": "accept",
        "content": {"name": "John Doe", "age": 30},
    }


def test_a_form_whose_required_field_has_no_default_is_declined() -> None:
    form = {**FORM, "requestedSchema": {**FORM["requestedSchema"], "required": ["note"]}}
    assert Host().answer("elicitation/create", form) == {"action": "decline"}


@pytest.mark.parametrize(
    ("host", "params"),
    [(Host(elicitation="decline"), FORM), (Host(), {"mode": "url", "url": "https://x.test", "message": "m"})],
    ids=["declined-by-the-scenario", "url-mode"],
)
def test_forms_declined(host: Host, params: dict[str, object]) -> None:
    assert host.answer("elicitation/create", params) == {"action": "decline"}


def test_sampling_is_declined_as_the_protocol_says_and_not_declared() -> None:
    host = Host()
    assert host.answer("sampling/createMessage", {"messages": []}) == Declined(
        -1, "User rejected sampling request"
    )
    assert host.member("sampling/createMessage", {}) == {
        "error": {"code": -1, "message": "User rejected sampling request"}
    }
    assert set(host.capabilities) == {"roots", "elicitation"}


def test_ping_is_answered_and_an_unknown_request_is_method_not_found() -> None:
    assert Host().member("ping", {}) == {"result": {}}
    unknown = Host().member("tasks/list", {})
    assert unknown["error"]["code"] == -32601
