#!/usr/bin/env bash
# Runs one whole task end to end with a SCRIPTED model (demo/script.yaml):
# a fresh sample repository, `agent task` (worktree, hardened sandbox, tool
# calls, commit, review), then the decision. On a terminal the approval
# form is shown; otherwise the task is merged (--approve merge).
#
# The task goes to your normal state directory, so `agent tasks` (run in
# the demo repository, or with --all) shows it afterwards. The demo
# repository lives in one fixed place, $XDG_CACHE_HOME/agent/demo (default
# ~/.cache/agent/demo), and is replaced on every run; the previous demo's
# tasks that are still open are discarded first and its records pruned.
#
#   AGENT=bin/agent bash demo/run.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
AGENT=${AGENT:-$root/bin/agent}
work=${AGENT_DEMO_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/agent/demo}
repo=$work/greeter

if [ -d "$repo/.git" ]; then
  open=$("$AGENT" tasks -q --repo "$repo" --state created,running,interrupted,review,kept,failed 2>/dev/null || true)
  if [ -n "$open" ]; then
    echo "==> discarding the previous demo's tasks: $open"
    # shellcheck disable=SC2086
    "$AGENT" discard --yes $open >/dev/null
  fi
  # Their records go too: the repository they belong to is replaced.
  "$AGENT" tasks prune --repo "$repo" --merged --older-than 0 >/dev/null 2>&1 || true
fi
rm -rf "$work"
mkdir -p "$work"
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
echo "==> agent tasks --repo $repo --all"
"$AGENT" tasks --repo "$repo" --all
echo
echo "==> the repository afterwards"
git -C "$repo" log --oneline --graph
echo
sh -c "cd '$repo' && sh greet.sh Ada"
echo
echo "The demo repository is $repo (replaced by the next demo run)."
echo "Its task is in your state directory: cd $repo && $AGENT tasks --all"
