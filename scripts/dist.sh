#!/usr/bin/env bash
# Makes an archive for a machine without network (make dist): the two
# static binaries, the sandbox image as a bundle, an install note and
# SHA-256 checksums of each file.
#
#   scripts/dist.sh BIN_DIR OUT_DIR VERSION
set -euo pipefail
bin=$1 out=$2 version=$3
name="agent-${version}-linux-$(go env GOARCH)"
stage="$out/$name"
rm -rf "$stage" "$out/$name.tar.gz"
mkdir -p "$stage"
echo "==> copying $bin/agent and $bin/agent-toolbox" >&2
cp "$bin/agent" "$bin/agent-toolbox" "$stage/"
echo "==> saving the sandbox image to $stage/images.tar.gz (agent images save)" >&2
"$bin/agent" images save -o "$stage/images.tar.gz" sandbox >&2
cat >"$stage/INSTALL" <<'NOTE'
Install on a Linux machine with a running Docker engine (no network needed):

  sha256sum -c SHA256SUMS                      # the files arrived whole
  sudo install -m 0755 agent agent-toolbox /usr/local/bin/   # keep them side by side
  agent images load -i images.tar.gz           # the sandbox image
  agent doctor                                 # checks the engine, the images, the toolbox

agent finds agent-toolbox next to itself. The llama-server image is not
included: build it with `agent images build llama-server` where Debian's
archive is reachable, then `agent images save` / `agent images load` it.
NOTE
(cd "$stage" && sha256sum agent agent-toolbox images.tar.gz INSTALL >SHA256SUMS)
tar -C "$out" -czf "$out/$name.tar.gz" "$name"
(cd "$out" && sha256sum "$name.tar.gz" >"$name.tar.gz.sha256")
echo "wrote $out/$name.tar.gz ($(du -h "$out/$name.tar.gz" | cut -f1)) and $out/$name.tar.gz.sha256" >&2
