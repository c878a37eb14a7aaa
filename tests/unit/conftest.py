from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture
def scenario_data() -> dict[str, Any]:
    """A minimal valid scenario as parsed YAML; tests mutate their own copy."""
    return {
        "name": "unit",
        "seed": 7,
        "target": {"command": ["{python}", "server.py"], "env": {"DB": "{data_dir}/x.db"}},
        "workload": {
            "intents": 100,
            "concurrency": 4,
            "tool": "create_invoice",
            "arguments": {
                "customer_id": "cust-{index}",
                "amount_cents": {"random_int": [100, 999]},
                "currency": {"choice": ["EUR", "USD", "TRY"]},
                "memo": "{marker}",
                "idempotency_key": "{key}",
                "lines": [{"sku": "a", "qty": {"random_int": [1, 3]}}],
            },
        },
        "faults": {"kill": {"count": 8}},
        "audit": {
            "effects": {"sql": {"url": "sqlite:///{data_dir}/x.db", "query": "SELECT memo AS marker FROM t"}}
        },
    }
