"""The scenario as a whole: its sections, and the text of the scenario as run."""

from __future__ import annotations

import re
from typing import Annotated
from urllib.parse import unquote

import yaml
from pydantic import Field, model_validator

from harness.scenario.client import ClientPolicy
from harness.scenario.effects import Audit
from harness.scenario.faults import Faults
from harness.scenario.gate import Gate
from harness.scenario.placeholders import map_strings
from harness.scenario.rules import check_sections
from harness.scenario.section import Section
from harness.scenario.services import Services
from harness.scenario.target import TargetSpec
from harness.scenario.workload import WorkloadSpec

_URL_PASSWORD = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://[^/\s:@]*:)([^@/\s]+)(@)")
"""``scheme://user:password@``: the password is group 2."""


class Scenario(Section):
    """Everything one run needs: one section per part, each validated, then :mod:`.rules` across them."""

    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")]
    description: str = ""
    seed: int = 0
    target: TargetSpec
    workload: WorkloadSpec
    client: ClientPolicy = Field(default_factory=ClientPolicy)
    faults: Faults = Field(default_factory=Faults)
    services: Services = Field(default_factory=Services)
    audit: Audit
    gate: Gate = Field(default_factory=Gate)

    @model_validator(mode="after")
    def _sections_fit(self) -> Scenario:
        check_sections(self)
        return self

    def dump_yaml(self) -> str:
        """The scenario as run, loadable again (placeholders other than scenario_dir kept).

        Passwords in URLs are replaced with ``***``: this text goes into the run
        directory and the report. The audit never needs them again, since live
        stores are read once, at the end of the run, into ``effects.json``.
        """
        data = map_strings(self.model_dump(mode="json"), lambda s: _URL_PASSWORD.sub(r"\1***\3", s))
        return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)

    def url_passwords(self) -> list[str]:
        """Passwords written into URLs anywhere in the scenario, as written and URL-decoded."""
        found: set[str] = set()

        def collect(text: str) -> str:
            for match in _URL_PASSWORD.finditer(text):
                found.update((match[2], unquote(match[2])))
            return text

        map_strings(self.model_dump(mode="json"), collect)
        return sorted(found)
