"""``catalog``: the tool list is stable across calls and restarts, keyed where effects are, in budget."""

from __future__ import annotations

import json
from typing import Any

from harness.client.http import LIST_PAGES
from harness.contract.framework import Check, CheckResult, Options, Seen, check
from harness.contract.judging import (
    listing_problems,
    snapshot_diff,
)
from harness.contract.session import ContractSession
from harness.contract.tokens import catalog_tokens
from harness.sanitize import json_safe


@check("catalog", "the catalog: the same every time, keys where effects are, within its token budget")
async def catalog(c: Check, s: ContractSession, o: Options, seen: Seen) -> CheckResult:
    first, again = await s.catalog(), await s.catalog()
    await s.restart(c.id)
    restarted = await s.catalog()
    tools = [t for t in first.get("tools") or [] if isinstance(t, dict)]
    costs, total = catalog_tokens(tools)
    evidence: dict[str, Any] = {
        "tools": len(tools),
        "tokens": {"total": total, **costs},
        "budget": o.token_budget,
    }
    problems = listing_problems(
        first, again, restarted, modern=s.wiring.protocol >= "2026", tokens=total, budget=o.token_budget
    )
    if o.snapshot is not None:
        listed = json_safe(s.wiring.redactor.data(tools))  # a server may list its token in a description
        if o.snapshot.is_file():
            changes = snapshot_diff(json.loads(o.snapshot.read_text(encoding="utf-8")), listed)
            problems += [f"since the snapshot {o.snapshot}: {change}" for change in changes]
        else:
            text = json.dumps(listed, indent=2, ensure_ascii=False) + "\n"
            o.snapshot.write_text(text, encoding="utf-8")
            evidence["snapshot"] = f"written to {o.snapshot}"
    if isinstance(first.get("nextCursor"), str):
        problems.append(
            f"tools/list goes on past {LIST_PAGES} pages ({len(tools)} tools read, those judged): a catalog "
            "that large costs every conversation that loads it"
        )
    mine = [p for p in problems if p.startswith(f"{s.tool} ")]  # the workload's tool, first
    problems = mine + [p for p in problems if p not in mine]
    evidence["problems"] = problems
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        return c.failed(problems[0] + more, evidence)
    listed = f"{len(tools)} tool{'' if len(tools) == 1 else 's'}"
    return c.passed(
        f"{listed}, {total} tokens (budget {o.token_budget}), stable across calls and a restart",
        evidence,
    )
