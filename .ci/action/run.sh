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
split="$("$python" -c 'import shlex, sys; print("\n".join(shlex.split(sys.argv[1])))' "${ARGS:-}")"
if [ -n "$split" ]; then
    mapfile -t extra <<<"$split"
    args+=("${extra[@]}")
fi

code=0
"$mcp_chaos" "${args[@]}" || code=$?

run_dir="$(find "$results" -mindepth 1 -maxdepth 1 -type d | head -n 1)"
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
