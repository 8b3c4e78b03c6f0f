#!/usr/bin/env bash
# A real-toolchain task with a SCRIPTED model (demo/python-script.yaml): a
# Python package whose .agent/environment.yaml asks for Debian's python3
# and python3-pytest. The first task builds the environment image (from
# the configured Debian mirror; once), the sandbox runs pytest with no
# network, and the review reports the test result. A second task reuses
# the image.
#
#   AGENT=bin/agent bash demo/run-python.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
AGENT=${AGENT:-$root/bin/agent}
work=$(mktemp -d "${TMPDIR:-/tmp}/agent-demo-python.XXXXXX")
export AGENT_STATE_DIR=${AGENT_STATE_DIR:-$work/state}
repo=$work/calc
mkdir -p "$repo"
cp -R "$here/python/." "$repo/"
git -C "$repo" init -q -b main
git -C "$repo" add .
git -C "$repo" -c user.name=demo -c user.email=demo@localhost commit -q -m "calc: mean"
echo "==> sample Python repository: $repo"
echo
echo "==> agent env show"
"$AGENT" env show --repo "$repo"
echo
echo "==> agent task with a SCRIPTED model (demo/python-script.yaml): canned replies, not a real model"
approve=merge
if [ -t 0 ] && [ -t 1 ]; then approve=ask; fi
"$AGENT" task --repo "$repo" --llm "script:$here/python-script.yaml" --approve "$approve" \
  "mean([]) should raise ValueError instead of dividing by zero"
echo
echo "==> agent env cache ls"
"$AGENT" env cache ls
echo
echo "demo files are in $work (state directory: $AGENT_STATE_DIR)"
