"""The reference target's requestState key settings: a bad one stops it at start with one line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import INVOICES

pytestmark = pytest.mark.integration


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"INVOICES_REQUEST_STATE": "cluster"}, "INVOICES_REQUEST_STATE='cluster'; choose process or shared"),
        (
            {"INVOICES_REQUEST_STATE": "shared", "INVOICES_REQUEST_STATE_KEY": "short"},
            "INVOICES_REQUEST_STATE_KEY must be at least 32 characters of secret randomness",
        ),
        (
            {"INVOICES_REQUEST_STATE": "shared", "INVOICES_DB": "postgresql://127.0.0.1:1/x"},
            "INVOICES_REQUEST_STATE=shared with a database URL needs INVOICES_REQUEST_STATE_KEY",
        ),
    ],
)
def test_a_bad_key_setting_is_one_line_and_exit_2(tmp_path: Path, env: dict[str, str], message: str) -> None:
    full = {**os.environ, "PORT": "1", "INVOICES_DB": str(tmp_path / "i.db"), **env}
    proc = subprocess.run(
        [sys.executable, str(INVOICES)], env=full, capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 2
    assert proc.stderr == f"invoices: {message}\n"
