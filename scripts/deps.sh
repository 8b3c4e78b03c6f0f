#!/usr/bin/env bash
# Installs the Debian packages that building the images and running the tests
# need. As root it runs apt-get itself; otherwise it prints the one command to
# run and exits non-zero. Used by `make demo`, `make test` and CI alike, so a
# fresh machine needs no other step.
#
#   scripts/deps.sh            # the packages the images and every test need
#   scripts/deps.sh demo       # only what make demo needs (image build, git)
set -euo pipefail

# debootstrap + busybox-static build the images offline (from Debian's
# archive or a local mirror); git and make run the tests; ca-certificates
# lets debootstrap verify an https mirror; tmux drives the interactive
# chat test in a real pseudo-terminal; podman, uidmap (newuidmap for its
# user namespace), catatonit, slirp4netns and runc run the sandbox suite
# against rootless Podman (make test-podman).
packages=(debootstrap busybox-static ca-certificates git make tmux podman uidmap catatonit slirp4netns runc)
# runsc (gVisor) runs the sandbox suites under isolation runsc, through a
# rootful Podman of the script's own (make test-runsc).
packages+=(runsc)
# The demo builds the sandbox image and runs one task: no container
# runtime beyond the Docker engine, no terminal multiplexer.
if [ "${1:-}" = demo ]; then
  packages=(debootstrap busybox-static ca-certificates git make)
fi

# dpkg-query answers for the exact package; `command -v` would miss
# busybox-static behind a dynamic busybox.
missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

if ! command -v apt-get >/dev/null 2>&1; then
  echo "missing packages: ${missing[*]} (this machine has no apt-get: install them with its package manager)" >&2
  exit 1
fi
if [ "$(id -u)" != 0 ]; then
  echo "missing packages: ${missing[*]}" >&2
  echo "run this once, then try again:" >&2
  echo "  sudo apt-get update && sudo apt-get install -y --no-install-recommends ${missing[*]}" >&2
  exit 1
fi

echo "==> installing ${missing[*]} (apt-get)" >&2
export DEBIAN_FRONTEND=noninteractive
# Some configured apt sources may be unreachable on an air-gapped or
# partially connected machine; the Debian archive or its mirror is what
# matters, so a partial update is not fatal.
log=$(mktemp)
trap 'rm -f "$log"' EXIT
apt-get update -q >"$log" 2>&1 || { echo "apt-get update reported errors (continuing):" >&2; tail -5 "$log" >&2; }
if ! apt-get install -y -q --no-install-recommends "${missing[@]}" >"$log" 2>&1; then
  cat "$log" >&2
  echo "installing ${missing[*]} failed; see above" >&2
  exit 1
fi
