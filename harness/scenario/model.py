"""The scenario as a whole: its sections, and the text of the scenario as run."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Annotated

import yaml
from pydantic import Field, model_validator

from harness.redaction import collect, mask_url_passwords
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

        Passwords in URLs are replaced with ``***`` (:mod:`harness.redaction`): this text goes into the run
        directory and the report. The audit never needs them again, since live
        stores are read once, at the end of the run, into ``effects.json``.
        """
        data = map_strings(self.model_dump(mode="json"), mask_url_passwords)
        return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)

    def secrets(self, environ: Mapping[str, str] | None = None) -> list[str]:
        """What no file or terminal may show (:func:`harness.redaction.collect`): the target's
        ``${VAR}`` values and credentials, and the passwords of URLs anywhere in the scenario."""
        strings: list[str] = []

        def gather(text: str) -> str:
            strings.append(text)
            return text

        map_strings(self.model_dump(mode="json"), gather)
        target = self.target
        return collect(target.env, target.headers, strings, os.environ if environ is None else environ)
