"""What one catalog costs written in three styles: the source article's section 06, measured.

Every tool description and schema is injected into the context of every agent
that lists the server, so a catalog is a per-session cost its callers pay. The
article tokenized its demo catalog (o200k_base) written bloated, engineered
(one sentence of purpose, one of rules) and terse: bloated cost 2.4 times the
engineered one, terse 38% less. Here the scenario's target is started once per
style, with the environment variable that selects its descriptions set to the
style's name, and ``tools/list`` is counted as the catalog check counts it.
The table, ``catalog-cost.md`` and ``catalog-cost.json`` say what was measured
beside what the article says.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.contract.session import variant_session
from harness.contract.tokens import ENCODING, catalog_tokens
from harness.report.tables import markdown_table
from harness.scenario import Scenario

STYLES = ("bloated", "engineered", "terse")
ARTICLE_BLOATED = 2.4
"""The article's bloated catalog, as a multiple of the engineered one."""
ARTICLE_TERSE_SAVING = 0.38
"""The article's terse catalog: this much less than the engineered one."""
ARTICLE_GAP_PER_M = 1.5e9
"""The article's gap between bloated and engineered, in tokens per million sessions."""
COST_MD = "catalog-cost.md"
COST_JSON = "catalog-cost.json"


@dataclass(frozen=True, slots=True)
class StyleCost:
    style: str
    tools: dict[str, int]
    total: int


@dataclass(frozen=True, slots=True)
class CatalogCost:
    env: str
    styles: dict[str, StyleCost]

    @property
    def bloated_ratio(self) -> float:
        return self.styles["bloated"].total / self.styles["engineered"].total

    @property
    def terse_saving(self) -> float:
        return 1 - self.styles["terse"].total / self.styles["engineered"].total

    @property
    def identical(self) -> bool:
        return len({cost.total for cost in self.styles.values()}) == 1


async def measure(scenario: Scenario, run_dir: Path, env: str) -> CatalogCost:
    """Start the target once per style (``env=<style>``, in ``run_dir/catalog-<style>/``) and count
    its catalog."""
    costs = {}
    for style in STYLES:
        session = variant_session(scenario, {env: style}, run_dir / f"catalog-{style}", secrets.token_hex(4))
        async with session.started():
            tools = await session.tools()
        per_tool, total = catalog_tokens(tools)
        costs[style] = StyleCost(style, per_tool, total)
    return CatalogCost(env, costs)


def render_table(cost: CatalogCost) -> str:
    names = list(dict.fromkeys(n for c in cost.styles.values() for n in c.tools))
    rows = [[name, *(str(cost.styles[s].tools.get(name, "-")) for s in STYLES)] for name in names]
    rows.append(["**total**", *(f"**{cost.styles[s].total}**" for s in STYLES)])
    return markdown_table(["tool", *STYLES], rows, align="lrrr")


def render_ratios(cost: CatalogCost) -> str:
    gap = cost.styles["bloated"].total - cost.styles["engineered"].total
    lines = [
        f"bloated / engineered: {cost.bloated_ratio:.2f}x (article: {ARTICLE_BLOATED}x)",
        f"terse vs engineered: {cost.terse_saving:.1%} fewer tokens (article: {ARTICLE_TERSE_SAVING:.0%})",
        f"bloated - engineered: {gap} tokens per session, {gap * 1e6 / 1e9:.2f} billion per 1M sessions "
        f"(article: {ARTICLE_GAP_PER_M / 1e9:g} billion)",
    ]
    if cost.identical:
        lines.append(f"the three styles cost the same: does the target read {cost.env}?")
    return "\n".join(lines)


def as_json(cost: CatalogCost, *, scenario: str) -> dict[str, Any]:
    return {
        "scenario": scenario,
        "encoding": ENCODING,
        "env": cost.env,
        "styles": {s: {"total": c.total, "tools": c.tools} for s, c in cost.styles.items()},
        "bloated_vs_engineered": round(cost.bloated_ratio, 4),
        "terse_saving_vs_engineered": round(cost.terse_saving, 4),
        "article": {
            "bloated_vs_engineered": ARTICLE_BLOATED,
            "terse_saving_vs_engineered": ARTICLE_TERSE_SAVING,
        },
    }


def write_reports(run_dir: Path, cost: CatalogCost, *, scenario: str) -> list[Path]:
    md, js = run_dir / COST_MD, run_dir / COST_JSON
    md.write_text(
        f"# Catalog cost: {scenario}\n\n{ENCODING} tokens of `tools/list` per tool, the target started with "
        f"`{cost.env}` set to each style.\n\n{render_table(cost)}\n\n{render_ratios(cost)}\n",
        encoding="utf-8",
    )
    js.write_text(json.dumps(as_json(cost, scenario=scenario), indent=2) + "\n", encoding="utf-8")
    return [md, js]
