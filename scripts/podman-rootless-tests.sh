#!/bin/sh
# Runs the sandbox integration tests against rootless Podman through its
# Docker-compatible API socket, as an unprivileged user, without touching the
# Docker daemon's configuration (make test-podman; CI runs it after make
# test). Needs root (to create the user) and Debian's podman, uidmap,
# catatonit and slirp4netns packages (scripts/deps.sh installs them).
#
# What it covers: hardening seen from inside and through inspect, the
# project's seccomp profile, the freeze (by signals: rootless Podman on
# cgroup v1 cannot pause), sessions and tool calls, egress, and the
# resource faults (about two minutes). On cgroup v1 a rootless container
# gets NO memory, pids or CPU cgroup limits: the toolbox's commands then run
# under RLIMIT_NPROC, which the tests check, while memory and CPU stay
# unlimited, which they log (the memory bomb is skipped: nothing would stop
# it; docs/engines.md). Inspect reports capabilities as a list and
# no-new-privileges without ":true"; the tests accept Podman's spelling.
#
# It configures the user's Podman to use runc (crun refuses a hybrid cgroup
# layout) and, where a VM left /dev/net/tun at 0600, gives it Debian's 0666
# for the control containers' slirp4netns. At the end it ends every process
# of the user (its service, pause process and lingering conmon monitors):
# the user is meant for this suite alone.
#
# Usage: scripts/podman-rootless-tests.sh [go test -run pattern]
set -eu
RUN=${1:-'TestHardening|TestCustomSeccomp|TestStrictSeccomp|Freeze|TestConcurrentToolCalls|TestToolCancel|TestSessionDeathFallsBack|TestExecStreamsAndPropagates|TestEgress|TestForkBomb|TestMemoryBomb|TestFloodOutput'}
CIUSER=${AGENT_CI_USER:-agentci}
ROOT=$(cd "$(dirname "$0")/.." && pwd)

[ "$(id -u)" = 0 ] || { echo "run as root: it creates the unprivileged user $CIUSER the suite runs as" >&2; exit 2; }
for p in podman newuidmap catatonit slirp4netns runc; do
	command -v "$p" >/dev/null || { echo "missing $p: apt-get install podman uidmap catatonit slirp4netns runc" >&2; exit 2; }
done
id "$CIUSER" >/dev/null 2>&1 || useradd -m -s /bin/sh "$CIUSER"
grep -q "^$CIUSER:" /etc/subuid || echo "$CIUSER:200000:65536" >>/etc/subuid
grep -q "^$CIUSER:" /etc/subgid || echo "$CIUSER:200000:65536" >>/etc/subgid
U=$(id -u "$CIUSER")
HOMEDIR=$(getent passwd "$CIUSER" | cut -d: -f6)
RUNDIR=/run/user/$U
mkdir -p "$RUNDIR" && chown "$CIUSER:" "$RUNDIR" && chmod 700 "$RUNDIR"
as_user() { runuser -u "$CIUSER" -- env -i PATH=/usr/bin:/bin HOME="$HOMEDIR" XDG_RUNTIME_DIR="$RUNDIR" "$@"; }

# crun refuses a hybrid cgroup hierarchy ("cgroups in hybrid mode not
# supported"); runc, which Docker uses anyway, runs there.
as_user mkdir -p "$HOMEDIR/.config/containers"
printf '[engine]\nruntime = "runc"\n' | as_user tee "$HOMEDIR/.config/containers/containers.conf" >/dev/null
# slirp4netns (the network of the tests' control containers) needs
# /dev/net/tun, which Debian's udev rules make 0666; some VMs leave it 0600.
if [ -c /dev/net/tun ] && [ "$(stat -c %a /dev/net/tun)" = 600 ]; then chmod 0666 /dev/net/tun; fi

# The images come from the Docker engine (nothing can be pulled).
docker save agent/busybox:latest agent/sandbox:latest | as_user podman load >/dev/null

SOCK=$RUNDIR/agent-test-$$.sock
WORK=$(mktemp -d)
chmod 755 "$WORK"
# Built as the caller; run as the unprivileged user (its workspaces must be
# its own files for the user namespace to map them).
cd "$ROOT"
CGO_ENABLED=0 go build -trimpath -o "$WORK/agent-toolbox" ./cmd/agent-toolbox
go test -c -o "$WORK/sandbox.test" ./sandbox
# The service exits by itself 30 s after its last request; the trap stops
# it sooner, and ends the user namespace's pause process that rootless
# Podman leaves behind, so nothing of the run stays.
as_user sh -c 'echo $$ >"$1"; exec podman system service --time=30 "unix://$2"' sh "$WORK/svc.pid" "$SOCK" >"$WORK/svc.log" 2>&1 </dev/null &
cleanup() {
	kill "$(cat "$WORK/svc.pid" 2>/dev/null)" 2>/dev/null || true
	sleep 1
	# What rootless Podman leaves running for the user: its namespace's
	# pause process, and conmon monitors that linger after exec sessions.
	# The user exists for this run only, so every process of it is ours.
	for p in $(ps -u "$CIUSER" -o pid= 2>/dev/null); do kill "$p" 2>/dev/null || true; done
	rm -rf "$WORK"
}
trap cleanup EXIT
i=0
while [ ! -S "$SOCK" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
[ -S "$SOCK" ] || { cat "$WORK/svc.log" >&2; echo "podman service did not start" >&2; exit 1; }

cd "$ROOT/sandbox"
start=$(date +%s)
rc=0
# Go on the PATH: the seccomp test builds its probe program.
GODIR=$(dirname "$(command -v go)")
as_user PATH="$GODIR:/usr/bin:/bin" GOTOOLCHAIN=local DOCKER_HOST="unix://$SOCK" AGENT_TEST_TOOLBOX="$WORK/agent-toolbox" TMPDIR="$HOMEDIR" \
	timeout 600 "$WORK/sandbox.test" -test.count=1 -test.run "$RUN" -test.v || rc=$?
echo "rootless podman suite: exit $rc in $(($(date +%s) - start)) s"
exit $rc
