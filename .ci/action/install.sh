#!/usr/bin/env bash
# The step action.yml runs to install the harness: a venv of its own under $RUNNER_TEMP, and the
# action's checkout installed into it as a user installs it (pip builds the wheel; no extra). Writes
# `bin=<the venv's bin directory>` to $GITHUB_OUTPUT for the run step.
#
# A script rather than lines in action.yml so that the install a user gets is the one tested:
# tests/integration/test_plain_install.py runs this very file, then every command from its venv.
#   PYTHON: the interpreter that makes the venv (actions/setup-python's); GITHUB_ACTION_PATH: the checkout.
set -euo pipefail
: "${PYTHON:?the interpreter that makes the venv}"
: "${GITHUB_ACTION_PATH:?the checkout of the action}"
venv="${RUNNER_TEMP:-${TMPDIR:-/tmp}}/mcp-chaos-venv"
"$PYTHON" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet "$GITHUB_ACTION_PATH"
echo "bin=$venv/bin" >> "${GITHUB_OUTPUT:-/dev/stdout}"
