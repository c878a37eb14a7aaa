"""The scenario as a whole: its sections, and the text of the scenario as run."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import Field, PrivateAttr, model_validator

from harness.redaction import MIN_DERIVED, collect, mask_literal_credentials, mask_url_passwords
from harness.scenario.client import ClientPolicy
from harness.scenario.effects import Audit
from harness.scenario.faults import Faults
from harness.scenario.gate import Gate
from harness.scenario.placeholders import Place, map_strings
from harness.scenario.rules import check_sections
from harness.scenario.section import Section
from harness.scenario.services import Services
from harness.scenario.target import TargetSpec
from harness.scenario.workload import WorkloadSpec
from harness.template import env_refs_in


class _Dumper(yaml.SafeDumper):
    """YAML that reads back as written: a string holding U+0085 (NEL, a line break to YAML) is
    double-quoted, where it is escaped; in any other style it reloaded as a space."""


def _text(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style='"' if "\x85" in value else None)


_Dumper.add_representer(str, _text)


def scenario_yaml(data: Any) -> str:
    """A scenario's data as the YAML a run directory or a reproducer holds: passwords in URLs masked."""
    masked = map_strings(data, mask_url_passwords)
    return yaml.dump(masked, Dumper=_Dumper, sort_keys=False, allow_unicode=True)


class Scenario(Section):
    """Everything one run needs: one section per part, each validated, then :mod:`.rules` across them."""

    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")]
    """The scenario's name (letters, digits, ``.``, ``_``, ``-``): part of every run's id."""
    description: str = ""
    """Free text, for people."""
    seed: int = 0
    """One seed for the intents, the fault schedule and the backoff's jitter: the same seed and scenario
    give the same run."""
    target: TargetSpec
    """The MCP server under test and how it is started (or reached), stopped and restarted."""
    workload: WorkloadSpec
    """The business intents to replay: the tool, its argument template, how many and how many at once."""
    client: ClientPolicy = Field(default_factory=ClientPolicy)
    """The protocol the client speaks and its retry policy: the client a server meets."""
    faults: Faults = Field(default_factory=Faults)
    """What breaks the target: kills, pauses, rollouts, stream faults and crash points (none: a run
    without faults)."""
    services: Services = Field(default_factory=Services)
    """What the harness runs beside the target, untouched by faults: PostgreSQL, nginx, a downstream proxy."""
    audit: Audit
    """Where the target's effects are counted, by marker, and the reads of them during the run."""
    gate: Gate = Field(default_factory=Gate)
    """Which findings fail the run (exit 1); without one, every finding does."""
    _scenario_dir: Path | None = PrivateAttr(default=None)
    _with_scenario_dir: dict[Place, str] = PrivateAttr(default_factory=dict)

    @property
    def scenario_dir(self) -> Path | None:
        """The directory ``{scenario_dir}`` was resolved to when the scenario was loaded (None: it was
        not): where a reproducer finds the paths the harness, not the user, wrote out."""
        return self._scenario_dir

    @property
    def with_scenario_dir(self) -> Mapping[Place, str]:
        """Each string the scenario's file wrote with ``{scenario_dir}``, by its place, as written (the
        loader resolved those, and only those): what a reproducer writes back, and nothing else."""
        return self._with_scenario_dir

    def __eq__(self, other: object) -> bool:
        """Two scenarios are equal when their fields are: where each was loaded from is not part of it
        (a run directory's copy equals the scenario it ran)."""
        if not isinstance(other, Scenario):
            return NotImplemented
        return self.__dict__ == other.__dict__

    def __hash__(self) -> int:
        return super().__hash__()

    @model_validator(mode="after")
    def _sections_fit(self) -> Scenario:
        check_sections(self)
        return self

    def dump_yaml(self) -> str:
        """The scenario as run, loadable again (placeholders other than scenario_dir kept).

        Passwords in URLs and credentials written out in the target's env and headers are replaced
        with ``***`` (:mod:`harness.redaction`): this text goes into the run directory and the report.
        The audit never needs them again, since live stores are read once, at the end of the run,
        into ``effects.json``, and the target is not started from it.
        """
        data = self.model_dump(mode="json")
        for entries in ("env", "headers"):
            data["target"][entries] = mask_literal_credentials(data["target"][entries])
        return scenario_yaml(data)

    def secrets(self, environ: Mapping[str, str] | None = None) -> list[str]:
        """What no file or terminal may show (:func:`harness.redaction.collect`): the target's
        ``${VAR}`` values and credentials, and the passwords of URLs anywhere in the scenario."""
        strings: list[str] = []

        def gather(text: str) -> str:
            strings.append(text)
            return text

        map_strings(self.model_dump(mode="json"), gather)
        target = self.target
        environ = os.environ if environ is None else environ
        commands = [
            word
            for command in (target.kill_command, target.restart_command)
            for word in ([command] if isinstance(command, str) else command or ())
        ]
        found = collect(target.env, target.headers, strings, environ, commands)
        auth = target.auth
        if auth is not None:  # the client's secrets, key and ID token: what they expand to, or as written
            idp = auth.idp
            held = (auth.client_secret, auth.private_key) + (
                () if idp is None else (idp.id_token, idp.client_secret)
            )
            for text in held:
                if text is not None:
                    for ref in env_refs_in(text):
                        text = text.replace(f"${{{ref}}}", environ.get(ref, ""))
                    parts = (text, *text.splitlines())  # a PEM key: each of its lines too
                    found.extend(part for part in parts if len(part.strip()) >= MIN_DERIVED)
        return sorted(set(found))
