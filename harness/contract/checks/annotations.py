"""``annotations``: what the tool declares of itself (idempotent, read-only) holds in what the checks saw."""

from __future__ import annotations

from harness.catalog import Annotations
from harness.contract.framework import Check, CheckResult, Options, Seen, check
from harness.contract.session import ContractSession


@check(
    "annotations",
    "annotations match behaviour (idempotentHint, readOnlyHint, destructiveHint)",
    needs=("replay", "restart_keeps_keys"),
    judges=True,
)
async def annotations_hold(c: Check, s: ContractSession, o: Options, seen: Seen) -> CheckResult:
    tools = {str(t.get("name")): t for t in await s.tools()}
    tool = tools.get(s.tool)
    if tool is None:
        return c.failed(
            f"{s.tool} is not in tools/list ({', '.join(tools) or 'empty'})", {"tools": list(tools)}
        )
    ann = Annotations.of(tool)
    evidence = {
        "tool": s.tool,
        "annotations": dict(ann.declared),
        "destructiveHint": ann.declared.get("destructiveHint"),
    }
    if ann.read_only is True and seen.made_effects:
        return c.failed(
            f"{s.tool} says readOnlyHint: true, and the checks saw it make effects: a client will call it "
            "freely; declare readOnlyHint: false",
            evidence,
        )
    again = {by: n for by, n in seen.repeated.items() if n > 1}
    if ann.idempotent is True and again:
        where = ", ".join(f"{by}: {n} effects" for by, n in again.items())
        return c.failed(
            f"{s.tool} says idempotentHint: true, and one call made again made a second effect ({where}): "
            "a client retries it freely; keep its keys where they outlive the process, or drop the hint",
            evidence,
        )
    if not ann.declared:
        return c.not_applicable(f"{s.tool} declares none", evidence)
    return c.passed("what it declares holds", evidence)
