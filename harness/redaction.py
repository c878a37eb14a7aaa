"""Secrets: which values of a scenario are secret, every form a server may echo them in, and text with
them hidden.

A scenario's secrets are what its ``${VAR}`` references expand to (the target's
env and headers), the values of env entries and headers named like credentials,
and passwords written into URLs (``scheme://user:password@`` and
``?password=``). A server under test is untrusted: it may echo a token in an
error, a log line, a handle or a header it quotes, and in whatever encoding its
framework chose. So each secret is expanded into the forms such text carries it
in (raw, JSON- and repr-escaped, URL-encoded in both styles or only in part,
base64 alone or inside ``user:secret`` at any alignment, also of the URL-encoded
secret as OAuth's HTTP Basic sends it, HTML entities, hex, and each of those of
the UTF-8 bytes read as Latin-1) and every form is replaced by ``***``. The value
of a query parameter named like a credential (``?api_key=``) is masked in any
text, declared or not.

Redaction comes first, before text is clipped, collapsed or escaped for an
output (see :mod:`harness.sanitize`): a cut or a collapsed space must never
leave part of a secret behind, or a form the redactor no longer recognises.
This module owns secrets; nothing else collects or masks them.
"""

from __future__ import annotations

import base64
import html
import json
import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import quote, quote_plus, unquote, unquote_plus

from harness.errors import HarnessError
from harness.history import excerpt
from harness.template import env_refs_in

MASK = "***"
URL_PASSWORD = re.compile(
    r"(?P<head>[A-Za-z][A-Za-z0-9+.-]*://[^/\s:@]*:)(?P<secret>[^@/\s]+)(?P<tail>@)"
    r"|(?P<qhead>[?&;](?:password|passwd|pwd|sslpassword)=)(?P<qsecret>[^&#\s]+)",
    re.IGNORECASE,
)
"""``scheme://user:password@`` and ``?password=`` in a connection URL (PostgreSQL takes both)."""
SECRET_NAME = re.compile(r"token|secret|passw|pwd|api[_-]?key|credential|^authorization$|^cookie$", re.I)
"""Env and header names whose values are secrets even when written literally (of MIN_DERIVED
characters or more: ``TOKEN_TTL: 60`` must not hide every 60)."""
CREDENTIAL_PARAM = re.compile(r"(?P<head>[?&;](?P<name>[\w.~%-]+)=)(?P<value>[^&#\s]+)")
"""A query parameter (``?name=value``, ``&``, ``;``), for :func:`mask_credential_params`."""
CREDENTIAL_PARAM_NAME = re.compile(rf"{SECRET_NAME.pattern}|signature|^(?:key|auth|sig)$", re.I)
"""Query parameter names whose values are credentials (``api_key``, ``access_token``, ``password``,
Google's ``key``, a signed URL's ``signature``), when of MIN_DERIVED characters or more."""
ERROR_LIMIT = 1000
"""How much of an error's one-line message a terminal shows once a server's text is in it."""
MIN_DERIVED = 4
"""Secrets shorter than this are hidden only as written: a base64 or hex fragment of one or two
characters would hide ordinary text everywhere."""
_UNRESERVED = re.compile(r"[A-Za-z0-9._~-]*")
"""RFC 3986's unreserved characters: what a client sends as it is in a URL."""
_PASSES = 3
"""A secret made of the mask's characters could reappear next to a mask; a few passes settle it."""


def _entities(value: str) -> set[str]:
    """``&<>"'`` as named, decimal and hexadecimal entities (HTML pages, XML attributes and text)."""
    named = {html.escape(value, quote=False), html.escape(value), html.escape(value).replace("&#x27;", "'")}
    special = "&<>\"'"
    decimal = "".join(f"&#{ord(c)};" if c in special else c for c in value)
    hexa = "".join(f"&#x{ord(c):x};" if c in special else c for c in value)
    return named | {decimal, hexa}


def _percent(value: str) -> set[str]:
    """URL-encoded, with ``%20`` and ``+`` for spaces, upper- and lower-case hex digits."""
    forms = {quote(value, safe=""), quote(value), quote_plus(value, safe=""), quote_plus(value)}
    return forms | {re.sub(r"%[0-9A-F]{2}", lambda m: m[0].lower(), f) for f in forms}


def _base64_cores(raw: bytes) -> set[str]:
    """What base64 of any text holding ``raw`` must contain, whatever precedes it (``user:`` in Basic
    auth): for each of the three alignments, the whole groups made of the secret's bytes only."""
    forms = {base64.b64encode(raw).decode()}
    for skip in range(3):
        body = raw[skip:]
        body = body[: len(body) - len(body) % 3]
        if len(body) >= 3:
            forms.add(base64.b64encode(body).decode())
    return forms | {f.replace("+", "-").replace("/", "_") for f in forms}


def _percent_pattern(secret: str) -> str:
    """A regular expression of ``secret`` URL-encoded as any client may have done it: each character as
    it is or as the ``%XX`` of its UTF-8 bytes (either case), a space also as ``+``. A client that
    encodes only what it must (``<`` and ``>``, not ``"``) makes a form no list of whole encodings has."""

    def digit(n: int) -> str:
        d = f"{n:X}"
        return f"[{d}{d.lower()}]" if d.isalpha() else d

    def character(c: str) -> str:
        encoded = "".join(f"%{digit(b >> 4)}{digit(b & 15)}" for b in c.encode("utf-8", "surrogatepass"))
        # The encoding first: a regular expression takes the first alternative that matches, and a raw
        # ``%`` is a prefix of ``%25``.
        return f"(?:{encoded}|{re.escape(c)}{'|[+]' if c == ' ' else ''})"

    return "".join(map(character, secret))


def _encodable(secret: str) -> bool:
    """Whether a client may send ``secret`` partly URL-encoded: it holds a character other than
    RFC 3986's unreserved ones (which no client encodes), and is long enough to be hidden in derived
    forms. A token of the unreserved alphabet (a JWT, a refresh token) is sent as it is."""
    return len(secret) >= MIN_DERIVED and _UNRESERVED.fullmatch(secret) is None


def forms_of(secret: str) -> set[str]:
    """Every form of ``secret`` the redactor hides as a string (see the module docstring; the mixed
    URL-encodings are a pattern, :func:`_percent_pattern`)."""
    forms: set[str] = set()
    for read in {secret, secret.encode("utf-8", "surrogatepass").decode("latin-1")}:
        forms |= {
            read,
            json.dumps(read)[1:-1],  # non-ASCII escaped too
            json.dumps(read, ensure_ascii=False)[1:-1],
            repr(read)[1:-1],
        }
        if len(read) >= MIN_DERIVED:
            forms |= _entities(read) | _percent(read)
    if len(secret) >= MIN_DERIVED:
        raw = secret.encode("utf-8", "surrogatepass")
        forms |= _base64_cores(raw) | {raw.hex(), raw.hex().upper()}
        # HTTP Basic as RFC 6749 2.3.1 has an OAuth client send it: base64 of id:secret, both URL-encoded.
        for encoded in _percent(secret) - {secret}:
            forms |= _base64_cores(encoded.encode("ascii"))
    # Quoted once more: a message quoting a server's JSON (``{...!r}`` of an escaped body).
    forms |= {escaped for form in forms for escaped in (json.dumps(form)[1:-1], repr(form)[1:-1])}
    return forms - {""}


class Redactor:
    """Hides secret values in text for people: one pattern of every form of every secret.

    Only free text a server or the OS wrote is redacted (messages, codes,
    replies, log lines, evidence), never identifiers or numbers the harness made.
    """

    def __init__(self, values: Iterable[str] = (), *, mask: str = MASK) -> None:
        """``mask`` replaces each form (``REDACTED`` where ``***`` would be YAML's alias syntax)."""
        self.mask = mask
        self._forms: set[str] = set()
        self._pattern: re.Pattern[str] | None = None
        self._encodings: set[str] = set()
        self._encoded: re.Pattern[str] | None = None
        self.add(*values)

    def add(self, *values: str) -> None:
        """Hide these too from now on: secrets found during a run (an OAuth flow's tokens)."""
        forms = {form for value in values if value for form in forms_of(value)} - self._forms
        if not forms:
            return
        self._forms |= forms
        ordered = sorted(self._forms, key=len, reverse=True)  # the longest form wins where two start together
        self._pattern = re.compile("|".join(map(re.escape, ordered)))
        self._encodings |= {_percent_pattern(value) for value in values if _encodable(value)}
        if self._encodings:
            self._encoded = re.compile("|".join(sorted(self._encodings, key=len, reverse=True)))

    def __bool__(self) -> bool:
        return self._pattern is not None

    def text(self, value: str) -> str:
        """``value`` with every form of every secret, and every credential-named query parameter's
        value (:func:`mask_credential_params`), replaced by the mask."""
        for _ in range(_PASSES):
            redacted = self._masked(value)
            redacted = mask_credential_params(redacted, self.mask)
            if redacted == value:
                break
            value = redacted
        return value

    def _masked(self, value: str) -> str:
        """Every form of every secret in ``value`` masked, the longest where forms start together: the
        whole forms, and (only where a URL-encoding is) the partly encoded ones. Two passes, one per
        pattern, masked a raw secret ending in ``%`` inside its own encoding (``…:%25``) and left the
        rest of the encoding shown."""
        patterns = [p for p in (self._pattern, self._encoded) if p is not None]
        if self._encoded is not None and "%" not in value and "+" not in value:
            patterns.remove(self._encoded)
        shown: list[str] = []
        at = 0
        ahead = {p: p.search(value) for p in patterns}  # each pattern's next match
        while found := [m for m in ahead.values() if m is not None]:
            start = min(m.start() for m in found)
            end = max(m.end() for p in patterns if (m := p.match(value, start)) is not None)
            shown += [value[at:start], self.mask]
            at = max(end, start + 1)
            for p, m in ahead.items():
                if m is not None and m.start() < at:
                    ahead[p] = p.search(value, at)
        shown.append(value[at:])
        return "".join(shown)

    def error(self, exc: HarnessError) -> HarnessError:
        """``exc`` with its message (cut to ERROR_LIMIT after redaction) and details redacted: an error
        that quotes a server (a 401's body, a log tail) is printed on a terminal."""
        exc.message = excerpt(self.text(exc.message), ERROR_LIMIT)
        exc.details = None if exc.details is None else self.text(exc.details)
        return exc

    def data(self, value: Any) -> Any:
        """JSON-like data with every string (keys too) redacted."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {self.data(k): self.data(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.data(v) for v in value]
        return value


def url_passwords(text: str) -> set[str]:
    """Passwords written into URLs in ``text``, as written and URL-decoded."""
    found: set[str] = set()
    for match in URL_PASSWORD.finditer(text):
        secret = match["secret"] or match["qsecret"]
        found |= {secret, unquote(secret), unquote_plus(secret)}
    return found


def mask_url_passwords(text: str) -> str:
    """``text`` with every password in a URL replaced by the mask (a scenario as dumped)."""

    def mask(match: re.Match[str]) -> str:
        if match["secret"]:
            return f"{match['head']}{MASK}{match['tail']}"
        return f"{match['qhead']}{MASK}"

    return URL_PASSWORD.sub(mask, text)


def mask_credential_params(text: str, mask: str = MASK) -> str:
    """``text`` with the value of every query parameter named like a credential (``?api_key=…``,
    ``&access_token=…``) replaced by ``mask``: a server's downstream call or an error quoting a URL
    carries its key there, declared or not."""

    def masked(match: re.Match[str]) -> str:
        value = match["value"]
        named = CREDENTIAL_PARAM_NAME.search(unquote_plus(match["name"])) is not None
        if not named or len(value) < MIN_DERIVED or value == mask:
            return match[0]
        return match["head"] + mask

    return CREDENTIAL_PARAM.sub(masked, text) if "=" in text else text


def mask_literal_credentials(entries: Mapping[str, str]) -> dict[str, str]:
    """Env entries or headers as a scenario is shown (the scenario as run, in the run directory and the
    reports): the value of each named like a credential and written out, where ``${VAR}`` was meant,
    masked (``Bearer ***`` for a token after a scheme). Values of fewer than MIN_DERIVED characters
    stay (``TOKEN_TTL: 60``), as :func:`collect` leaves them."""
    return {name: _masked_literal(name, value) for name, value in entries.items()}


def _masked_literal(name: str, value: str) -> str:
    if not SECRET_NAME.search(name) or env_refs_in(value) or len(value) < MIN_DERIVED:
        return value
    scheme, _, token = value.strip().partition(" ")
    return f"{scheme} {MASK}" if token.strip() and scheme.isalpha() else MASK


def literal_credential(name: str, value: str) -> bool:
    """Whether a header or env value named like a credential holds one written out, where ``${VAR}``
    was meant (a shell expanded ``"Bearer ${TOKEN}"`` in double quotes): a scenario must name the
    variable, never keep its value."""
    if not SECRET_NAME.search(name) or env_refs_in(value):
        return False
    return any(len(part) >= 8 for part in _credential(value) - {value} or {value})


def _credential(value: str) -> set[str]:
    """A header or env value named like a credential: the whole, and the token after a scheme
    (``Bearer abc`` hides ``abc`` wherever a server quotes it alone)."""
    scheme, _, token = value.strip().partition(" ")
    return {value, token.strip()} if token.strip() and scheme.isalpha() else {value}


def collect(
    env: Mapping[str, str],
    headers: Mapping[str, str],
    strings: Iterable[str],
    environ: Mapping[str, str],
    commands: Iterable[str] = (),
) -> list[str]:
    """A target's secrets: what the ``${VAR}`` of its ``env``, ``headers`` and ``commands`` (the words of a
    url target's kill and restart commands) expand to, the values of entries named like credentials,
    and the passwords of URLs among ``strings`` (the whole scenario)."""
    found: set[str] = set()
    for text in (*env.values(), *headers.values(), *commands):
        found |= {environ[name] for name in env_refs_in(text) if name in environ}
    for entries in (env, headers):
        for name, text in entries.items():
            if SECRET_NAME.search(name):
                expanded = text
                for ref in env_refs_in(text):
                    expanded = expanded.replace(f"${{{ref}}}", environ.get(ref, ""))
                found |= {v for v in _credential(expanded) if len(v) >= MIN_DERIVED}
    for text in strings:
        found |= url_passwords(text)
    return sorted(value for value in found if value.strip())
