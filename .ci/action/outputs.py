"""A run's figures as a GitHub Action's step outputs, read from its summary.json.

Prints one ``name=value`` line per output, the format ``$GITHUB_OUTPUT`` takes
(``run.sh`` appends them there). Standard library only, and no import of the
harness: it reads the run directory as any consumer of summary.json would, so
a change of that file's shape breaks ``tests/integration/test_action.py``.

A value that is not a plain word or number is refused rather than written: a
line break in one would let it set other outputs of the step.
"""

from __future__ import annotations

import json
import re
import stat
import sys
from pathlib import Path
from typing import Any

PLAIN = re.compile(r"[A-Za-z0-9_.+\-]*")
LIMIT = 64 << 20
"""The most of summary.json read: a run's is a few kilobytes."""


def outputs(summary: dict[str, Any]) -> dict[str, str]:
    """The step outputs of one run's summary."""
    verdicts, duplicate = summary["verdicts"], summary["rates"]["duplicate"]
    return {
        "verdict": "pass" if summary["gate"]["passed"] else "fail",
        "headline": summary["headline"]["kind"],
        "duplicates": str(verdicts["duplicate"]),
        "lost": str(verdicts["lost"]),
        "intents": str(duplicate["n"]),
        "duplicate-rate": f"{duplicate['rate']:.6g}",
    }


def lines(values: dict[str, str]) -> str:
    for name, value in values.items():
        if not PLAIN.fullmatch(value):
            raise ValueError(f"output {name}: {value!r} is not a plain word or number")
    return "".join(f"{name}={value}\n" for name, value in values.items())


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: outputs.py RUN_DIR", file=sys.stderr)
        return 2
    path = Path(argv[1]) / "summary.json"
    try:
        if not stat.S_ISREG(path.lstat().st_mode):  # a link, a FIFO or a device: it may never end
            print(
                f"outputs.py: {path} is not the file the run wrote (a link, FIFO or device)", file=sys.stderr
            )
            return 2
        with open(path, "rb") as f:
            raw = f.read(LIMIT + 1)
        if len(raw) > LIMIT:
            print(f"outputs.py: {path} is larger than a run's summary ({LIMIT >> 20} MiB)", file=sys.stderr)
            return 2
        text = lines(outputs(json.loads(raw.decode("utf-8"))))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        print(f"outputs.py: {path} cannot be read: {exc}", file=sys.stderr)
        return 2
    except (KeyError, TypeError, ValueError) as exc:  # a damaged or foreign summary: no outputs from it
        print(f"outputs.py: {path} is not a run's summary ({type(exc).__name__}: {exc})", file=sys.stderr)
        return 2
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
