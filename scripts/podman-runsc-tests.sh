#!/usr/bin/env bash
# Runs the sandbox integration suites (hardening, egress, freeze, tool
# sessions) with their sandboxes under gVisor (AGENT_TEST_ISOLATION=runsc),
# through a private rootful Podman service whose default runtime is runsc.
# The Docker daemon's configuration is never touched: its images are copied
# into a throwaway Podman store, and everything the script makes lives in
# one temporary directory that it removes.
#
# Why Podman, and why rootful: the Docker engine can run runsc only when
# its daemon.json registers it (with --network=none), a change to a shared
# daemon; Podman's service takes its runtimes from a containers.conf of our
# own (CONTAINERS_CONF). Its Docker-compatible API ignores the runtime a
# create request names, so the service's DEFAULT runtime is runsc, and the
# engine then offers exactly isolation runsc. Rootful, because runsc runs
# rootless only with its own --rootless mode and rootless Podman on cgroup
# v1 gives no memory or pids limits at all; as root, the limits apply and
# pause works (runsc pause), so host steps run on a frozen sandbox.
#
# Needs root and Debian's podman, runc and runsc packages (scripts/deps.sh).
#
# Usage: scripts/podman-runsc-tests.sh [sandbox tests -run pattern [end-to-end tests -run pattern]]
set -euo pipefail
RUN=${1:-'TestHardeningFromInside|TestHardeningFromInspect|TestPrivilegeEscalationFails|TestToolboxCannotBeTakenOver|TestEgress|TestFreezeStopsEveryProcess|TestForkBombHitsPidsLimit|TestTimeoutKillsEverything|TestFloodOutputIsCapped|TestConcurrentToolCalls|TestToolCancel|TestSessionDeathFallsBack|TestBashToolShell'}
E2E=${2:-'TestTaskKeepsIsolationEndToEnd'}
ROOT=$(cd "$(dirname "$0")/.." && pwd)

[ "$(id -u)" = 0 ] || { echo "podman-runsc-tests: run as root (a rootful Podman service)" >&2; exit 2; }
for p in podman runsc runc docker; do
	command -v "$p" >/dev/null || { echo "missing $p: apt-get install podman runc runsc (scripts/deps.sh)" >&2; exit 2; }
done

# A short path: conmon's attach sockets live under the run root, and a unix
# socket path may not exceed 108 bytes.
WORK=$(mktemp -d /tmp/agent-runsc.XXXXXX)
chmod 755 "$WORK"
P="podman --root $WORK/storage --runroot $WORK/run"
export CONTAINERS_CONF="$WORK/containers.conf"
cleanup() {
	set +e
	[ -f "$WORK/svc.pid" ] && kill "$(cat "$WORK/svc.pid")" 2>/dev/null || true
	$P rm -af -t 0 >/dev/null 2>&1 || true
	# Not `system reset`: it would also remove the machine's own rootful
	# Podman networks.
	$P rmi -af >/dev/null 2>&1 || true
	{ grep -o " $WORK[^ ]*" /proc/self/mounts || true; } | sort -r | while read -r m; do umount "$m" 2>/dev/null || true; done
	rm -rf "$WORK"
}
trap cleanup EXIT

# gVisor, with the two flags a sandbox needs: no network stack of its own
# (it refuses to start here with one, and sandboxes have no network
# anyway), and opening host unix sockets, the only way to the egress
# proxy's socket bind-mounted into the sandbox.
cat >"$WORK/runsc-nonet" <<'EOF'
#!/bin/sh
exec /usr/bin/runsc --network=none --host-uds=open "$@"
EOF
chmod 755 "$WORK/runsc-nonet"
# Rootful Podman sets nofile/nproc rlimits above this machine's hard limits
# by default, and the container then fails to start: stay at or below them
# (nproc 32768 at most, the highest value the test machine accepted).
nofile=$(ulimit -Hn)
nproc=$(ulimit -Hu)
if [ "$nproc" = unlimited ] || [ "$nproc" -gt 32768 ]; then nproc=32768; fi
if [ "$nofile" = unlimited ]; then nofile=1048576; fi
cat >"$CONTAINERS_CONF" <<EOF
[containers]
default_ulimits = ["nofile=$nofile:$nofile", "nproc=$nproc:$nproc"]
[engine]
runtime = "runsc"
[engine.runtimes]
runsc = ["$WORK/runsc-nonet"]
EOF

start=$(date +%s)
# The images come from the Docker engine (nothing can be pulled).
docker save agent/busybox:latest agent/sandbox:latest | $P load -q >/dev/null

SOCK=$WORK/podman.sock
$P system service --time=0 "unix://$SOCK" >"$WORK/svc.log" 2>&1 </dev/null &
echo $! >"$WORK/svc.pid"
i=0
while [ ! -S "$SOCK" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
[ -S "$SOCK" ] || { cat "$WORK/svc.log" >&2; echo "the Podman service did not start" >&2; exit 1; }

cd "$ROOT"
go test -c -o "$WORK/sandbox.test" ./sandbox
go test -c -o "$WORK/tests.test" ./tests
echo "podman-runsc-tests: set up in $(($(date +%s) - start)) s"
cd "$ROOT/sandbox"
rc=0
DOCKER_HOST="unix://$SOCK" AGENT_TEST_ISOLATION=runsc \
	timeout 600 "$WORK/sandbox.test" -test.count=1 -test.timeout 9m -test.run "$RUN" -test.v || rc=$?
# A task and its follow-up through the built binary, under gVisor.
cd "$ROOT/tests"
DOCKER_HOST="unix://$SOCK" AGENT_TEST_ISOLATION=runsc \
	timeout 300 "$WORK/tests.test" -test.count=1 -test.timeout 4m -test.run "$E2E" -test.v || rc=$?
if [ $rc -ne 0 ]; then
	echo "--- Podman service log (tail)"
	tail -20 "$WORK/svc.log"
fi
echo "podman-runsc-tests: exit $rc in $(($(date +%s) - start)) s"
exit $rc
