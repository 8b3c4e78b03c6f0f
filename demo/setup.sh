#!/usr/bin/env bash
# Creates the demo's sample repository (a fresh git repository holding
# demo/sample with one commit) at the directory given as $1.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dest=${1:?usage: demo/setup.sh DIR}
if [ -e "$dest" ]; then
  echo "demo/setup.sh: $dest already exists" >&2
  exit 1
fi
mkdir -p "$dest"
cp -R "$here/sample/." "$dest/"
git -C "$dest" init -q -b main
git -C "$dest" add .
git -C "$dest" -c user.name=demo -c user.email=demo@localhost commit -q -m "greeter: print a greeting"
echo "$dest"
