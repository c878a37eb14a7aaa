#!/usr/bin/env bash
# The step action.yml runs: `mcp-chaos run` of the scenario, with the job's step summary (the
# harness writes it where $GITHUB_STEP_SUMMARY names) and JUnit XML, then the run's figures as
# step outputs (outputs.py). Exits with mcp-chaos's code, after the outputs are written, so that
# the artifact and the outputs exist when the gate fails.
#
# The action's inputs arrive as environment variables (never spliced into this script):
#   SCENARIO (required), IMAGE, FAIL_ON, ARGS (split as a shell would, without running anything);
#   MCP_CHAOS and MCP_CHAOS_PYTHON: the harness's command and interpreter (action.yml installs them).
set -euo pipefail
: "${SCENARIO:?the scenario input is required}"
mcp_chaos="${MCP_CHAOS:-mcp-chaos}"
python="${MCP_CHAOS_PYTHON:-python3}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
results="$(mktemp -d "${RUNNER_TEMP:-${TMPDIR:-/tmp}}/mcp-chaos.XXXXXX")"
output="${GITHUB_OUTPUT:-/dev/stdout}"

args=(run "$SCENARIO" --results "$results" --junit "$results/junit.xml")
if [ -n "${IMAGE:-}" ]; then
    args+=(--set "target.image=$IMAGE" --set target.command=null)
fi
if [ -n "${FAIL_ON:-}" ]; then
    args+=(--fail-on "$FAIL_ON")
fi
# ARGS split NUL-separated (an argument may hold a line break); one that cannot be split (an
# unbalanced quote) is a usage error, exit 2, with the outputs still written below. The message does
# not quote ARGS: it may carry a --set with a secret.
split="$(mktemp "${RUNNER_TEMP:-${TMPDIR:-/tmp}}/mcp-chaos-args.XXXXXX")"
code=0
if "$python" -c '
import shlex, sys
try:
    parts = shlex.split(sys.argv[1])
except ValueError as exc:
    sys.exit(f"mcp-chaos action: the args input cannot be split as a shell would ({exc}); balance its quotes")
sys.stdout.write("".join(part + "\0" for part in parts))
' "${ARGS:-}" >"$split"; then
    mapfile -d '' -t extra <"$split"
    "$mcp_chaos" "${args[@]}" "${extra[@]}" || code=$?
else
    code=2
fi
rm -f "$split"

# The run's directory: the first made (its name starts with the time), not the folder of findings it
# remembered nor the runs that replayed remembered ones (--findings in ARGS), made after it.
run_dir="$(find "$results" -mindepth 2 -maxdepth 2 -name scenario.yaml -printf '%h\n' | sort | head -n 1)"
{
    echo "exit-code=$code"
    echo "results=$results"
    if [ -f "$results/junit.xml" ]; then
        echo "junit=$results/junit.xml"
    fi
    if [ -n "$run_dir" ]; then
        echo "run-dir=$run_dir"
    fi
    # The artifact's name, unique in a workflow run: the run's id (time, scenario name, random), or
    # the results directory's name when no run started (a bad scenario).
    if [ -n "$run_dir" ]; then
        echo "artifact=mcp-chaos-$(basename "$run_dir")"
    else
        echo "artifact=$(basename "$results")"
    fi
    if [ -n "$run_dir" ] && [ -f "$run_dir/summary.json" ]; then
        "$python" "$here/outputs.py" "$run_dir"
    fi
} >>"$output"
exit "$code"
