"""What every command pays before it does anything: the imports of ``harness.cli``."""

from __future__ import annotations

import subprocess
import sys


def test_the_cli_does_not_import_the_kubernetes_client() -> None:
    # A fresh interpreter: this one has imported whatever other tests needed. The Kubernetes client
    # is half a second of imports; only a scenario with target.kubernetes needs it (pods/factory.py).
    probe = "import sys, harness.cli; print(sorted(m for m in sys.modules if m.startswith('kubernetes')))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_the_cli_imports_no_command_s_heavy_modules() -> None:
    # Each command imports what it uses when it runs (harness/cli/__init__.py): asyncio was 28 ms of
    # every command's start, audit's included, when one command's module imported it at its top.
    heavy = ("asyncio", "pandas", "pyarrow", "duckdb", "pydantic", "docker", "httpx", "mcp")
    probe = (
        f"import sys, harness.cli; print(sorted({{m.split('.')[0] for m in sys.modules}} & {set(heavy)!r}))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
