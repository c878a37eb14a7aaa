"""Scenario validation: every bad input is one line that names the field and the fix."""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any

import pytest
import yaml

import harness.scenario
from harness.errors import ScenarioError
from harness.scenario import Window, apply_override, load_scenario, parse_scenario
from tests.helpers.scenarios import invoice_scenario


def parse(data: dict[str, Any], *overrides: str) -> Any:
    return parse_scenario(copy.deepcopy(data), source="s.yaml", overrides=overrides)


def error_of(data: dict[str, Any], *overrides: str) -> str:
    with pytest.raises(ScenarioError) as info:
        parse(data, *overrides)
    message = info.value.message
    assert "\n" not in message
    assert info.value.exit_code == 2
    return message


def test_valid_scenario_parses(scenario_data: dict[str, Any]) -> None:
    s = parse(scenario_data)
    assert s.workload.intents == 100
    assert s.client.max_attempts == 20  # defaults fill in
    assert s.faults.kill is not None
    assert s.faults.kill.count == 8


def test_missing_field_is_named(scenario_data: dict[str, Any]) -> None:
    del scenario_data["workload"]["tool"]
    assert error_of(scenario_data) == (
        "s.yaml: workload.tool: required field is missing: "
        "the tool every intent calls, e.g. tool: create_note"
    )


def test_a_misspelt_field_is_offered_the_one_meant(scenario_data: dict[str, Any]) -> None:
    scenario_data["faults"]["kill"]["cout"] = 3
    assert error_of(scenario_data) == "s.yaml: faults.kill.cout: unknown field; did you mean count?"


def test_an_unknown_field_like_none_lists_the_fields_of_its_section(scenario_data: dict[str, Any]) -> None:
    scenario_data["client"] = {"backoff": {"zzz": 1}}
    assert error_of(scenario_data) == (
        "s.yaml: client.backoff.zzz: unknown field (the fields here: initial_s, jitter, max_s, multiplier)"
    )


def test_a_misspelt_field_in_a_list_item_is_offered_the_one_meant(scenario_data: dict[str, Any]) -> None:
    scenario_data["faults"]["stream"] = [{"fault": "stall", "tol": "create_invoice"}]
    assert error_of(scenario_data) == "s.yaml: faults.stream.0.tol: unknown field; did you mean tool?"


def test_unknown_field_is_named(scenario_data: dict[str, Any]) -> None:
    scenario_data["workload"]["concurency"] = 3
    assert error_of(scenario_data).startswith("s.yaml: workload.concurency: unknown field")


def test_out_of_range_value_shows_input(scenario_data: dict[str, Any]) -> None:
    scenario_data["workload"]["concurrency"] = 0
    assert error_of(scenario_data) == "s.yaml: workload.concurrency: Input should be greater than 0 (got 0)"


def test_unknown_argument_placeholder(scenario_data: dict[str, Any]) -> None:
    scenario_data["workload"]["arguments"]["memo"] = "{marke}"
    msg = error_of(scenario_data)
    assert "unknown placeholder {marke}" in msg
    assert "{marker}" in msg  # the fix: what is allowed


def test_generator_must_be_well_formed(scenario_data: dict[str, Any]) -> None:
    scenario_data["workload"]["arguments"]["amount_cents"] = {"random_int": [5, 1]}
    assert "random_int needs [low, high]" in error_of(scenario_data)


def test_kill_needs_exactly_one_trigger(scenario_data: dict[str, Any]) -> None:
    scenario_data["faults"]["kill"] = {"count": 2, "mean_interval_s": 1.0}
    assert "exactly one of count or mean_interval_s" in error_of(scenario_data)


def test_unsupported_database_url(scenario_data: dict[str, Any]) -> None:
    scenario_data["audit"]["effects"]["sql"]["url"] = "mysql://x"
    assert "unsupported database URL" in error_of(scenario_data)


def test_overrides_apply_and_are_validated(scenario_data: dict[str, Any]) -> None:
    s = parse(scenario_data, "workload.intents=5", "target.env.MODE=keyed", "seed=9")
    assert (s.workload.intents, s.target.env["MODE"], s.seed) == (5, "keyed", 9)
    assert "workload.intents" in error_of(scenario_data, "workload.intents=-5")
    assert "not PATH=VALUE" in error_of(scenario_data, "workload.intents")


def test_env_scalars_become_strings(scenario_data: dict[str, Any]) -> None:
    s = parse(scenario_data, "target.env.MS=0.3", "target.env.N=5", "target.env.ON=true")
    assert (s.target.env["MS"], s.target.env["N"], s.target.env["ON"]) == ("0.3", "5", "true")
    assert "target.env.X" in error_of(scenario_data, "target.env.X=[1, 2]")


def test_scenario_dir_placeholder_resolves_on_load(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(
        "name: t\ntarget: {command: ['{python}', '{scenario_dir}/server.py']}\n"
        "workload: {intents: 1, tool: x, arguments: {memo: '{marker}'}}\n"
        "audit: {effects: {sql: {url: 'sqlite:///{data_dir}/x.db', query: 'select 1 as marker'}}}\n"
    )
    s = load_scenario(path)
    assert s.target.command == ["{python}", f"{tmp_path}/server.py"]
    # The dump is loadable again and stays the same (what a run directory relies on).
    again = tmp_path / "again.yaml"
    again.write_text(s.dump_yaml())
    assert load_scenario(again) == s


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match="scenario file not found"):
        load_scenario(tmp_path / "nope.yaml")


def test_bad_yaml_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("name: x\nworkload: [1, 2\n")
    with pytest.raises(ScenarioError, match=r"bad.yaml: not valid YAML at line \d+"):
        load_scenario(path)


def test_not_a_mapping(tmp_path: Path) -> None:
    path = tmp_path / "list.yaml"
    path.write_text("- 1\n- 2\n")
    with pytest.raises(ScenarioError, match="a scenario is a YAML mapping"):
        load_scenario(path)


def test_shipped_scenarios_are_valid() -> None:
    root = Path(__file__).resolve().parents[2] / "scenarios"
    files = sorted(root.glob("*.yaml"))
    assert files, "no scenarios shipped"
    for path in files:
        assert load_scenario(path).name


@pytest.mark.parametrize(
    ("where", "value", "expected"),
    [
        ("workload.arguments.memo", "{marker!z}", "bad placeholder {marker!z}"),
        ("workload.arguments.memo", "{marker:d}", "bad placeholder {marker:d}"),
        ("workload.arguments.memo", "{marker", "unmatched '{'"),
        ("workload.arguments.memo", "x}", "unmatched '}'"),
        ("target.command", ["{python}", "{port:q}"], "bad placeholder {port:q}"),
        (
            "target.command",
            ["sh", "-c", "{ [ -d .git ] || git init -q; } && exec server"],
            "a brace meant as itself (a shell's { ...; }, JSON) is written twice: {{ and }}",
        ),
        ("target.env.DB", "{data_dir.x}", "bad placeholder {data_dir.x}"),
        ("audit.effects.sql.url", "sqlite:///{data_dir!z}/x.db", "bad placeholder {data_dir!z}"),
    ],
)
def test_placeholders_are_bare_names_or_the_scenario_is_invalid(
    scenario_data: dict[str, Any], where: str, value: Any, expected: str
) -> None:
    # Python's format language would accept these and fail only mid-run; the scenario refuses them.
    node = scenario_data
    *parents, last = where.split(".")
    for part in parents:
        node = node.setdefault(part, {})
    node[last] = value
    assert expected in error_of(scenario_data)


def test_the_marker_must_be_somewhere_in_the_arguments(scenario_data: dict[str, Any]) -> None:
    scenario_data["workload"]["arguments"]["memo"] = "no marker here"
    assert "no argument holds the intent's {marker}" in error_of(scenario_data)


def test_deeply_nested_arguments_are_refused(scenario_data: dict[str, Any]) -> None:
    deep: Any = "{marker}"
    for _ in range(500):
        deep = {"x": deep}
    scenario_data["workload"]["arguments"] = {"deep": deep}
    with pytest.raises(ScenarioError, match="nested more than 32 levels deep"):
        parse_scenario(scenario_data)  # not the deep-copying helper: the copy itself would recurse


def test_an_unquoted_protocol_version_is_the_version(scenario_data: dict[str, Any]) -> None:
    # YAML reads 2025-11-25 as a date; the scenario means the protocol version.
    assert parse(scenario_data, "client.protocol=2025-11-25").client.protocol == "2025-11-25"
    assert "client.protocol" in error_of(scenario_data, "client.protocol=2024-11-05")


def test_what_a_stdio_target_cannot_have(scenario_data: dict[str, Any]) -> None:
    scenario_data["target"]["transport"] = "stdio"
    assert parse(scenario_data).target.transport == "stdio"
    with_rule = copy.deepcopy(scenario_data)
    with_rule["faults"]["stream"] = [{"fault": "stall", "probability": 0.1}]
    assert "faults.stream needs an HTTP target" in error_of(with_rule)
    with_headers = copy.deepcopy(scenario_data)
    with_headers["target"]["headers"] = {"Authorization": "Bearer x"}
    assert "a stdio target has none" in error_of(with_headers)
    with_image = copy.deepcopy(scenario_data)
    with_image["target"] = {"image": "x:1", "transport": "stdio"}
    assert parse(with_image).target.runtime == "docker"  # attached through the engine


def test_environment_variables_only_where_they_are_expanded(scenario_data: dict[str, Any]) -> None:
    ok = parse(scenario_data, "target.env.TOKEN=${SECRET}", "target.headers.Authorization=Bearer ${SECRET}")
    assert ok.target.headers == {"Authorization": "Bearer ${SECRET}"}
    assert "environment variables are expanded only in" in error_of(
        scenario_data, "workload.arguments.memo=${X}"
    )
    assert "not an HTTP header name" in error_of(scenario_data, "target.headers.bad name=x")


@pytest.mark.parametrize("name", ["A=B", "", "A\0B"])
def test_env_names_that_no_environment_can_hold(scenario_data: dict[str, Any], name: str) -> None:
    scenario_data["target"]["env"] = {name: "x"}
    assert "cannot be an environment variable's name" in error_of(scenario_data)


def test_key_placement(scenario_data: dict[str, Any]) -> None:
    meta = parse(scenario_data, "client.key_in=meta")
    assert (meta.client.key_meta, meta.client.key_header) == ("idempotencyKey", None)
    header = parse(scenario_data, "client.key_in=header", "client.key_name=X-Key")
    assert (header.client.key_meta, header.client.key_header) == (None, "X-Key")
    assert "client.key_name names" in error_of(scenario_data, "client.key_name=k")


def test_answers_are_forms_of_scalars(scenario_data: dict[str, Any]) -> None:
    scenario_data["workload"]["answers"] = {"customer": {"customer_id": "acme-inc", "n": 2, "tags": ["a"]}}
    assert parse(scenario_data).workload.answers["customer"]["n"] == 2
    scenario_data["workload"]["answers"] = {"customer": {"customer_id": {"nested": 1}}}
    assert error_of(scenario_data) == (
        "s.yaml: workload.answers: answer customer.customer_id: a form field is a string, number, "
        "true/false or a list of strings (got {'nested': 1})"
    )
    scenario_data["workload"]["answers"] = {"customer": {"n": 2**64}}
    assert "a form field is a string, number" in error_of(scenario_data)
    scenario_data["workload"]["answers"] = {"customer": {}}
    assert "no empty names or forms" in error_of(scenario_data)
    scenario_data["workload"]["answers"] = {"customer": "acme-inc"}
    assert error_of(scenario_data).startswith(
        "s.yaml: workload.answers.customer: Input should be a valid dict"
    )
    assert "client.max_input_rounds: Input should be less than or equal to 10" in error_of(
        scenario_data, "workload.answers={}", "client.max_input_rounds=11"
    )


# -- the one window of counted faults

WINDOWED: dict[str, dict[str, Any]] = {
    "kill": {"count": 1},
    "pause": {"count": 1, "duration_s": 1},
    "rollout": {"count": 1},
}
"""The faults with a window, each at its smallest valid form."""


@pytest.mark.parametrize("pair", [(0, 1), (0, 0.5), (0.5, 1), (0.999, 1), (0, 1e-9)])
def test_a_window_inside_zero_to_one_passes(pair: tuple[float, float]) -> None:
    Window(*pair).check("faults.kill.window")


@pytest.mark.parametrize(
    ("pair", "shown"),
    [
        ((0.5, 0.5), "[0.5, 0.5]"),  # empty
        ((0.9, 0.1), "[0.9, 0.1]"),  # reversed
        ((-0.1, 0.5), "[-0.1, 0.5]"),
        ((0.2, 1.1), "[0.2, 1.1]"),
        ((math.nan, 1), "[nan, 1]"),
    ],
)
def test_a_window_outside_gives_one_message_naming_its_field(pair: tuple[float, float], shown: str) -> None:
    with pytest.raises(ValueError, match=r"^faults\.pause\.window must satisfy") as info:
        Window(*pair).check("faults.pause.window")
    assert str(info.value) == f"faults.pause.window must satisfy 0 <= low < high <= 1, got {shown}"


@pytest.mark.parametrize("fault", sorted(WINDOWED))
def test_kill_pause_and_rollout_share_the_window(scenario_data: dict[str, Any], fault: str) -> None:
    scenario_data["faults"] = {fault: {**WINDOWED[fault], "window": [1, 0.25]}}
    assert error_of(scenario_data) == (
        f"s.yaml: faults.{fault}: faults.{fault}.window must satisfy 0 <= low < high <= 1, got [1.0, 0.25]"
    )
    scenario_data["faults"][fault]["window"] = [0.25, 1]
    scenario = parse(scenario_data)
    window = getattr(scenario.faults, fault).window
    assert (type(window), window.low, window.high) == (Window, 0.25, 1.0)
    # Written back as the pair it was written as, so the run directory's copy loads again.
    assert yaml.safe_load(scenario.dump_yaml())["faults"][fault]["window"] == [0.25, 1.0]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("x", "faults.kill.window: Input should be a valid tuple (got 'x')"),
        ({"low": 0.1, "high": 0.2}, "faults.kill.window: Input should be a valid tuple"),
        ([0.5], "faults.kill.window.1: required field is missing"),
        ([0.1, 0.2, 0.3], "faults.kill.window: Tuple should have at most 2 items after validation, not 3"),
    ],
)
def test_a_window_that_is_not_a_pair_keeps_pydantic_s_words(
    scenario_data: dict[str, Any], value: Any, expected: str
) -> None:
    scenario_data["faults"]["kill"]["window"] = value
    assert error_of(scenario_data) == f"s.yaml: {expected}"


# -- overrides (--set) and the scenario as run


def test_an_override_makes_the_sections_it_needs() -> None:
    data: dict[str, Any] = {"name": "x"}
    apply_override(data, "faults.kill.count=3")
    apply_override(data, "description=")
    apply_override(data, "target.command=[a, '{port}'")  # not YAML: the text itself
    assert data == {
        "name": "x",
        "faults": {"kill": {"count": 3}},
        "description": "",
        "target": {"command": "[a, '{port}'"},
    }


def test_an_override_that_is_one_placeholder_is_its_text_not_a_mapping() -> None:
    """``--set workload.arguments.priority={index}``: YAML reads ``{index}`` as {index: null}, sent as
    an object and never rendered; it is the placeholder. A real flow mapping is still one."""
    data: dict[str, Any] = {}
    apply_override(data, "workload.arguments.priority={index}")
    apply_override(data, "workload.arguments.meta={a: 1}")
    assert data == {"workload": {"arguments": {"priority": "{index}", "meta": {"a": 1}}}}


@pytest.mark.parametrize(
    ("assignment", "expected"),
    [
        ("=1", "override '=1' is not PATH=VALUE (e.g. workload.intents=100)"),
        ("name.first=1", "override 'name.first=1': 'name' is not a section"),
        ("x=" + "[" * 70 + "]" * 70, "collections nest more than 64 levels deep"),
    ],
)
def test_a_bad_override_is_one_line(assignment: str, expected: str) -> None:
    with pytest.raises(ScenarioError) as info:
        apply_override({"name": "x"}, assignment)
    assert expected in info.value.message
    assert "\n" not in info.value.message


def test_passwords_in_urls_stay_out_of_the_scenario_as_run(scenario_data: dict[str, Any]) -> None:
    scenario_data["services"] = {"postgres": {}}
    scenario_data["audit"]["effects"]["sql"]["url"] = "postgresql://app:p%40ss@127.0.0.1:5432/shop"
    scenario = parse(scenario_data)
    assert scenario.secrets({}) == ["p%40ss", "p@ss"]
    dumped = scenario.dump_yaml()
    assert "postgresql://app:***@127.0.0.1:5432/shop" in dumped
    assert "p%40ss" not in dumped


def test_the_package_exports_every_name_the_harness_imports() -> None:
    """Other modules import from ``harness.scenario``, never from its modules: this is that surface."""
    assert harness.scenario.__all__ == [
        "AUDIT_PLACEHOLDERS",
        "BALANCER_FACTS",
        "DOWNSTREAM_FACTS",
        "POSTGRES_FACTS",
        "READ_TOOL_PLACEHOLDERS",
        "RESERVED_HEADERS",
        "SERVICES",
        "SINK_FACTS",
        "TARGET_PLACEHOLDERS",
        "Audit",
        "Backoff",
        "BalancerService",
        "ClientPolicy",
        "CommandEffects",
        "CrashExplore",
        "CrashHold",
        "CrashPoints",
        "DownstreamEffects",
        "DownstreamService",
        "Effects",
        "Faults",
        "FilesEffects",
        "Gate",
        "HoldDispatch",
        "JsonlEffects",
        "KillFaults",
        "KubernetesTarget",
        "PauseFaults",
        "PostgresService",
        "RolloutFaults",
        "Scenario",
        "ServiceFacts",
        "Services",
        "SinkEffects",
        "SqlEffects",
        "StreamFault",
        "TargetSpec",
        "ToolEffects",
        "Window",
        "WorkloadSpec",
        "apply_override",
        "load_scenario",
        "parse_scenario",
        "single_select",
    ]
    for name in harness.scenario.__all__:
        assert getattr(harness.scenario, name) is not None


@pytest.mark.parametrize("where", ["workload", "faults", "effects"])
def test_a_tool_name_with_a_line_break_is_refused_where_it_is_given(where: str) -> None:
    """It was sent raw in Mcp-Name: through the proxy every attempt failed and the run retried for minutes."""
    data = invoice_scenario(mode="atomic")
    bad = "create_invoice\nX-Evil: 1"
    if where == "workload":
        data["workload"]["tool"] = bad
    elif where == "faults":
        data["faults"] = {"stream": [{"fault": "sever_response", "tool": bad}]}
    else:
        data["audit"] = {"effects": {"tool": {"tool": bad}}}
    with pytest.raises(ScenarioError, match=r"holds the control character '\\n': it is sent in the Mcp-Name"):
        parse_scenario(data)


@pytest.mark.parametrize(
    ("auth", "expected"),
    [
        ({"grant": "client_credentials"}, "needs client_id"),
        ({"client_id": "c"}, "needs client_secret"),
        ({"client_id": "c", "token_endpoint_auth": "private_key_jwt"}, "needs private_key"),
        ({"grant": "authorization_code", "token_endpoint_auth": "private_key_jwt"}, "goes with"),
        ({"client_id": "c", "client_secret": "${S}", "grant": "password"}, "grant"),
        ({"client_id": "c", "client_secret": "${S", "issuer": "https://as"}, "target.auth.client_secret"),
    ],
)
def test_target_auth_says_what_a_grant_needs(
    scenario_data: dict[str, Any], auth: dict[str, Any], expected: str
) -> None:
    scenario_data["target"]["auth"] = auth
    with pytest.raises(ScenarioError, match=expected):
        parse_scenario(scenario_data)


def test_target_auth_and_a_static_authorization_header_do_not_go_together(
    scenario_data: dict[str, Any],
) -> None:
    scenario_data["target"]["auth"] = {"client_id": "c", "client_secret": "${S}"}
    scenario_data["target"]["headers"] = {"authorization": "Bearer ${T}"}
    with pytest.raises(ScenarioError, match="keep one"):
        parse_scenario(scenario_data)


def test_the_client_secret_of_target_auth_is_a_secret_of_the_scenario(scenario_data: dict[str, Any]) -> None:
    scenario_data["target"]["auth"] = {"client_id": "c", "client_secret": "${OAUTH_SECRET}"}
    scenario = parse_scenario(scenario_data)
    assert "value-of-the-secret" in scenario.secrets({"OAUTH_SECRET": "value-of-the-secret"})
    assert scenario.target.auth is not None
    assert scenario.target.auth.client_secret == "${OAUTH_SECRET}"  # the name is kept, not the value


CROSS_APP_ACCESS: dict[str, Any] = {
    "grant": "cross_app_access",
    "client_id": "c",
    "client_secret": "${S}",
    "issuer": "https://as.example.com",
    "idp": {"token_endpoint": "https://idp.example.com/token", "id_token": "${IDP_ID_TOKEN}"},
}


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (
            {"idp": None},
            "target.auth: the cross_app_access grant needs idp (the identity provider's token_endpoint "
            "and the id_token it exchanges)",
        ),
        ({"client_id": None}, "the cross_app_access grant needs client_id"),
        ({"client_secret": None}, "the cross_app_access grant needs client_secret"),
        ({"issuer": None}, "the cross_app_access grant needs issuer (the authorization server the grant"),
        (
            {"token_endpoint_auth": "none"},
            "the cross_app_access grant authenticates with client_secret_basic or client_secret_post, "
            "not none",
        ),
        (
            {"idp": {"token_endpoint": "https://idp.example.com/token", "id_token": "eyJhbGciOi.x.y"}},
            "target.auth.idp.id_token must be one ${VAR}",
        ),
        (
            {"idp": {"token_endpoint": "https://idp/t", "id_token": "${A}${B}"}},
            "target.auth.idp.id_token must be one ${VAR}",
        ),
        (
            {"idp": {"token_endpoint": "idp.example.com/token", "id_token": "${T}"}},
            "target.auth.idp.token_endpoint: String should match",
        ),
        (
            {"idp": {"token_endpoint": "https://idp/t", "id_token": "${T}", "secret": "x"}},
            "target.auth.idp.secret: unknown field; did you mean client_secret?",
        ),
        (
            {"idp": {"token_endpoint": "https://idp/t", "id_token": "${T}", "client_secret": "${X}"}},
            "target.auth.idp: client_secret needs client_id",
        ),
        ({"grant": "client_credentials"}, "target.auth.idp goes with grant: cross_app_access"),
    ],
)
def test_target_auth_says_what_cross_app_access_needs_in_one_line(
    scenario_data: dict[str, Any], change: dict[str, Any], expected: str
) -> None:
    auth = {**CROSS_APP_ACCESS, **change}
    scenario_data["target"]["auth"] = {k: v for k, v in auth.items() if v is not None}
    with pytest.raises(ScenarioError) as raised:
        parse_scenario(scenario_data)
    assert expected in raised.value.message
    assert "\n" not in raised.value.message


def test_the_id_token_of_cross_app_access_is_a_secret_kept_by_name(scenario_data: dict[str, Any]) -> None:
    from harness.pods.factory import target_oauth

    auth = {**CROSS_APP_ACCESS, "token_endpoint_auth": "client_secret_post", "scope": "mcp:read"}
    auth["idp"] = {**auth["idp"], "client_id": "idp-client", "client_secret": "${IDP_SECRET}"}
    scenario_data["target"]["auth"] = auth
    scenario = parse_scenario(scenario_data)
    environ = {"S": "the-client-secret", "IDP_ID_TOKEN": "eyJ.the-id-token.sig", "IDP_SECRET": "idp-secret-1"}
    assert {"the-client-secret", "eyJ.the-id-token.sig", "idp-secret-1"} <= set(scenario.secrets(environ))
    assert scenario.target.auth is not None
    assert scenario.target.auth.idp is not None
    assert scenario.target.auth.idp.id_token == "${IDP_ID_TOKEN}"
    settings = target_oauth(scenario.target, environ)
    assert settings is not None
    assert settings.idp is not None
    assert (settings.grant, settings.issuer, settings.auth_method) == (
        "cross_app_access",
        "https://as.example.com",
        "client_secret_post",
    )
    assert settings.idp.token_endpoint == "https://idp.example.com/token"
    assert (settings.idp.id_token, settings.idp.client_id, settings.idp.client_secret) == (
        "eyJ.the-id-token.sig",
        "idp-client",
        "idp-secret-1",
    )
    assert set(settings.secrets()) == {"the-client-secret", "eyJ.the-id-token.sig", "idp-secret-1"}


def test_a_directory_named_as_the_scenario_is_said_to_be_one(tmp_path: Path) -> None:
    (tmp_path / "dir.yaml").mkdir()
    with pytest.raises(ScenarioError, match=r"dir\.yaml is a directory, not a scenario file"):
        load_scenario(tmp_path / "dir.yaml")


def test_a_misspelt_field_is_named_before_the_field_it_leaves_missing(
    scenario_data: dict[str, Any],
) -> None:
    data = copy.deepcopy(scenario_data)
    data["workload"]["tol"] = data["workload"].pop("tool")
    with pytest.raises(
        ScenarioError, match=r"workload\.tol: unknown field; did you mean tool\? \(and 1 more\)"
    ):
        parse_scenario(data)
