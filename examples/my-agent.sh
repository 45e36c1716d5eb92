#!/usr/bin/env bash
# A command worker: the protocol of docs/loops.md ("command worker") in a few lines, to copy
# and replace the middle of with your agent.
#
#   loopactors run "|loop:3| tighten the wording of README.md" --worker "command:examples/my-agent.sh"
#
# One process per round. stdin: the round's prompt (in inherit mode the previous round's
# output, a --- line, then the task). The environment: LOOPACTORS_LOOP_ID, LOOPACTORS_ROUND,
# LOOPACTORS_ROUNDS, LOOPACTORS_MODE and, if the loop has one, LOOPACTORS_OBJECTIVE.
# stdout: the round's output. Exit 0: the round completed; any other code: it failed (the
# end of stderr is kept as its error). A stop or a timeout sends SIGTERM, then SIGKILL.
set -euo pipefail

prompt=$(cat)

# The work. Replace this stand-in with your agent, e.g. output=$(claude -p "$prompt").
# It says what it was given, so the loop has something to show.
task=${prompt##*$'\n---\n'}
task=${task#$'\n'}
echo "round ${LOOPACTORS_ROUND} of ${LOOPACTORS_ROUNDS} (${LOOPACTORS_MODE} mode) on: ${task%%$'\n'*}"
if [ "${LOOPACTORS_ROUND}" -gt 1 ]; then
    echo "building on the $(printf '%s\n' "$prompt" | wc -l | tr -d ' ') lines of the prompt"
fi

# The objective: when the loop has one, check it; if it is met, say so on the last line of
# stdout (that line is removed from the output). MY_AGENT_CHECK is this example's check, a
# shell command that exits 0 when the objective holds (e.g. "pytest -q").
if [ -n "${LOOPACTORS_OBJECTIVE:-}" ] && [ -n "${MY_AGENT_CHECK:-}" ] \
    && sh -c "$MY_AGENT_CHECK" >/dev/null 2>&1; then
    echo "objective met: ${LOOPACTORS_OBJECTIVE}"
    echo '{"loopactors": {"done": true}}'
fi
