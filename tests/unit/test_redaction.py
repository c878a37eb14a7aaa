"""Secrets: every form a server may echo a secret in is hidden, in any text, before any cut.

The property tests draw secrets, encodings and the text around them; the named
cases are the ones an adversarial pass found leaking.
"""

from __future__ import annotations

import base64
import html
import json
import re
from collections.abc import Callable
from urllib.parse import quote, quote_plus

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.errors import TargetError
from harness.history import excerpt
from harness.redaction import MASK, Redactor, collect, forms_of, mask_url_passwords, url_passwords
from tests.helpers.quick import examples

TOKEN = 'Zq9S3cr3t+/=&<>"x'

ENCODINGS: dict[str, Callable[[str], str]] = {
    "raw": lambda s: s,
    "json": lambda s: json.dumps(s)[1:-1],
    "json-unicode": lambda s: json.dumps(s, ensure_ascii=False)[1:-1],
    "repr": lambda s: repr(s)[1:-1],
    "url": lambda s: quote(s, safe=""),
    "url-lower": lambda s: re.sub(r"%[0-9A-F]{2}", lambda m: m[0].lower(), quote(s, safe="")),
    "url-plus": lambda s: quote_plus(s),
    "base64": lambda s: base64.b64encode(s.encode()).decode(),
    "base64-urlsafe": lambda s: base64.urlsafe_b64encode(s.encode()).decode(),
    "basic-auth": lambda s: base64.b64encode(f"user:{s}".encode()).decode(),
    "basic-auth-long-user": lambda s: base64.b64encode(f"someone:{s}".encode()).decode(),
    "html": lambda s: html.escape(s),
    "html-text": lambda s: html.escape(s, quote=False),
    "html-decimal": lambda s: "".join(f"&#{ord(c)};" if c in "&<>\"'" else c for c in s),
    "hex": lambda s: s.encode().hex(),
    "HEX": lambda s: s.encode().hex().upper(),
    "latin-1": lambda s: s.encode().decode("latin-1"),
}

secrets_ = st.text(
    alphabet=st.characters(codec="utf-8", exclude_characters="*"), min_size=8, max_size=40
).filter(lambda s: s.strip() == s and len(set(s)) > 3)
around = st.text(max_size=60)


def test_every_form_of_the_issue_token_is_hidden() -> None:
    redactor = Redactor([TOKEN])
    for name, encode in ENCODINGS.items():
        shown = redactor.text(f"token: {encode(TOKEN)}; done")
        assert encode(TOKEN) not in shown, name
        assert MASK in shown, name


def test_redaction_comes_before_a_space_is_collapsed() -> None:
    secret = "Ab  Cd-S3cr3t-99"
    said = f"bad token {secret}\n\tplease"
    assert excerpt(Redactor([secret]).text(said)) == "bad token *** please"


@settings(max_examples=examples(300), suppress_health_check=[HealthCheck.too_slow])
@given(secret=secrets_, before=around, after=around, encoding=st.sampled_from(sorted(ENCODINGS)))
def test_no_secret_survives_in_any_encoding_inside_any_text(
    secret: str, before: str, after: str, encoding: str
) -> None:
    encoded = ENCODINGS[encoding](secret)
    shown = Redactor([secret]).text(before + encoded + after)
    assert encoded not in shown
    assert secret not in shown


@given(secret=secrets_, text=st.text(alphabet="abc xyz-_.:/0123456789", max_size=80))
def test_text_without_the_secret_is_left_alone(secret: str, text: str) -> None:
    if any(form in text for form in forms_of(secret)):
        return
    assert Redactor([secret]).text(text) == text


def test_an_error_is_redacted_and_cut_for_the_terminal() -> None:
    error = TargetError(f"it answered HTTP 401: {'y' * 2000} {TOKEN}", details=f"log: {TOKEN}\nmore")
    Redactor([TOKEN]).error(error)
    assert TOKEN not in error.message
    assert len(error.message) <= 1000
    assert error.details == "log: ***\nmore"


def test_redacting_data_reaches_keys_and_nested_strings() -> None:
    data = {"handle": [f"h-{TOKEN}", 3], TOKEN: {"why": TOKEN}}
    assert Redactor([TOKEN]).data(data) == {"handle": ["h-***", 3], MASK: {"why": MASK}}


def test_passwords_in_urls_are_found_and_masked_in_both_places() -> None:
    text = "postgresql://app:p%40ss@127.0.0.1/shop and postgresql://127.0.0.1/shop?user=app&password=s3cr%3Dt"
    assert url_passwords(text) == {"p%40ss", "p@ss", "s3cr%3Dt", "s3cr=t"}
    assert mask_url_passwords(text) == (
        "postgresql://app:***@127.0.0.1/shop and postgresql://127.0.0.1/shop?user=app&password=***"
    )


def test_a_scenario_s_secrets_are_its_variables_credentials_and_url_passwords() -> None:
    env = {"API_TOKEN": "literal-token-value", "TOKEN_TTL": "60", "DB": "postgresql://u:pw9!x@h/db"}
    headers = {"Authorization": "Bearer ${TOKEN}", "X-Trace": "${TRACE}"}
    found = collect(env, headers, [*env.values(), *headers.values()], {"TOKEN": TOKEN, "TRACE": "t-1234"})
    assert set(found) == {TOKEN, f"Bearer {TOKEN}", "t-1234", "literal-token-value", "pw9!x"}


def test_a_secret_found_during_a_run_is_hidden_from_then_on_in_its_every_form() -> None:
    redactor = Redactor(["first-secret-value"])
    token = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJuaWdodGx5In0.c2lnbmF0dXJl"
    assert token in redactor.text(f"Bearer {token}")
    redact = redactor.text  # bound before the token is added, as the history writer binds it
    redactor.add(token)
    assert redact(f"Bearer {token} and first-secret-value") == "Bearer *** and ***"
    assert token not in redactor.text(json.dumps({"t": token}))
    redactor.add(token, "")  # again, and nothing: no change
    assert redactor.text("plain text") == "plain text"


@settings(max_examples=examples(200), suppress_health_check=[HealthCheck.too_slow])
@given(secret=secrets_, data=st.data())
def test_a_secret_url_encoded_only_in_part_is_hidden(secret: str, data: st.DataObject) -> None:
    """A client encodes what it must and leaves the rest: each character as it is or as its %XX."""
    encoded = [quote(c, safe="") for c in secret]
    keep = data.draw(st.lists(st.booleans(), min_size=len(secret), max_size=len(secret)))
    mixed = "".join(c if raw else e for c, e, raw in zip(secret, encoded, keep, strict=True))
    shown = Redactor([secret]).text(f"GET /v1/charges?q={mixed}&n=1 HTTP/1.1")
    assert mixed not in shown
    assert shown.endswith(f"{MASK}&n=1 HTTP/1.1")


def test_a_secret_ending_in_a_percent_sign_is_hidden_with_its_encoding() -> None:
    """Found by the property above: the raw secret is a prefix of its own partial encoding (``:%`` then
    ``:%25``), and masking the raw one first left ``25`` shown."""
    assert Redactor(["000001:%"]).text("q=000001:%25&n=1") == f"q={MASK}&n=1"


def test_the_issue_token_with_only_its_angle_brackets_encoded_is_hidden() -> None:
    partly = TOKEN.replace("<", "%3C").replace(">", "%3e")
    assert Redactor([TOKEN]).text(f"/v1/charges?memo={partly}") == f"/v1/charges?memo={MASK}"


@pytest.mark.parametrize("client_id", ["c", "nightly-job", "ab", "client:42", "x" * 31])
@pytest.mark.parametrize("encode", [lambda s: quote(s, safe=""), quote_plus])
def test_the_oauth_basic_header_of_a_url_encoded_secret_is_hidden(
    client_id: str, encode: Callable[[str], str]
) -> None:
    """RFC 6749 2.3.1: ``Basic`` base64 of the URL-encoded id, ``:``, and the URL-encoded secret, as the
    SDK sends it; an authorization server quoting it back must not show the secret's bytes."""
    secret = 's3cr3t/+&<>"x y=='
    header = base64.b64encode(f"{encode(client_id)}:{encode(secret)}".encode()).decode()
    shown = Redactor([secret]).text(f'invalid_client: got "Basic {header}"')
    assert MASK in shown
    # Whatever base64 is left shows the id and at most the secret's edge bytes, never its middle.
    start = (len(encode(client_id)) + 1 + 3) // 3 * 4 + 4
    for i in range(start, len(header) - 8):
        assert header[i : i + 8] not in shown, (i, shown)


@pytest.mark.parametrize(
    "name", ["api_key", "apikey", "API-KEY", "token", "access_token", "password", "secret", "client_secret",
             "key", "X-Amz-Signature", "sig"],
)  # fmt: skip
def test_a_query_parameter_named_like_a_credential_is_masked_undeclared(name: str) -> None:
    path = f"/v1/charges?amount=500&{name}=sk_live_4eC39HqLyjWDarjtT1zdp7dc&memo=ab-m0000001"
    assert Redactor().text(path) == f"/v1/charges?amount=500&{name}={MASK}&memo=ab-m0000001"
    assert Redactor(mask="REDACTED").text(f"{path};x") == (
        f"/v1/charges?amount=500&{name}=REDACTED&memo=ab-m0000001;x"
    )


@pytest.mark.parametrize(
    "text",
    [
        "/v1/charges?amount=500&memo=ab-m0000001&page_size=10",
        "/v1/sessions?token_ttl=60&limit=5",  # shorter than MIN_DERIVED: a number, not a secret
        "a token=abcdef in a sentence",  # not a query: nothing before it
    ],
)
def test_other_query_parameters_are_left_alone(text: str) -> None:
    assert Redactor().text(text) == text
