"""What several checks say: the advice where no key travels, where a replay must be stored, and why a
success that stored nothing fails."""

from __future__ import annotations

from harness.client.messages import CallResult
from harness.contract.judging import failure_text
from harness.contract.session import ContractSession
from harness.history import excerpt

NO_KEY = "a retry cannot be told from a new call: give the tool an idempotency key"
REPLAY_IT = "store the first result with the key and return it, as it was, to every retry"


def nothing_stored(res: CallResult, s: ContractSession) -> str:
    """Why a success with no effect fails, quoting the reply when it reads as a failure."""
    source = f" (the effect source: {excerpt(s.source_error, 120)})" if s.source_error else ""
    if (text := failure_text(res)) is not None:
        return (
            f"a failure reported as success: it answered OK with {excerpt(text, 120)!r} and stored "
            f"nothing{source}"
        )
    return (
        f"it answered OK and the effect source found nothing{source}: the server stored nothing, or "
        "audit.effects does not see it (validate --preflight tells which)"
    )
