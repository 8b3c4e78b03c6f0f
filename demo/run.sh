#!/usr/bin/env bash
# Runs one whole task end to end with a SCRIPTED model (demo/script.yaml):
# a fresh sample repository, `agent task` (worktree, hardened sandbox, tool
# calls, commit, review), then the decision. On a terminal the approval
# form is shown; otherwise the task is merged (--approve merge).
#
#   AGENT=bin/agent bash demo/run.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
AGENT=${AGENT:-$root/bin/agent}
work=$(mktemp -d "${TMPDIR:-/tmp}/agent-demo.XXXXXX")
export AGENT_STATE_DIR=${AGENT_STATE_DIR:-$work/state}
repo=$work/greeter

"$here/setup.sh" "$repo" >/dev/null
echo "==> sample repository: $repo"
git -C "$repo" log --oneline
echo
echo "==> agent task with a SCRIPTED model (demo/script.yaml): canned replies, not a real model"
approve=merge
if [ -t 0 ] && [ -t 1 ]; then approve=ask; fi
"$AGENT" task --repo "$repo" --llm "script:$here/script.yaml" --approve "$approve" \
  "Make greet.sh greet the name given as its first argument (default: world)"
echo
echo "==> agent tasks"
"$AGENT" tasks
echo
echo "==> the repository afterwards"
git -C "$repo" log --oneline --graph
echo
sh -c "cd '$repo' && sh greet.sh Ada"
echo
echo "demo files are in $work (state directory: $AGENT_STATE_DIR)"
