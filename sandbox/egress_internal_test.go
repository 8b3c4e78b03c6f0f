package sandbox

import (
	"slices"
	"testing"
)

// TestApplyEgressToSandboxSpec applies the egress wiring to the create
// request Engine.Create really makes, so a change to the hardened spec that
// breaks it (another main process, a network) fails here.
func TestApplyEgressToSandboxSpec(t *testing.T) {
	s, err := Spec{Workspace: t.TempDir(), Toolbox: "/usr/local/bin/agent-toolbox"}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	cfg, hc, err := containerConfig(s, UserChoice{UID: 1000, GID: 1000})
	if err != nil {
		t.Fatal(err)
	}
	before := len(hc.Mounts)
	if err := ApplyEgress(cfg, hc, "/state/tasks/t1/egress"); err != nil {
		t.Fatalf("ApplyEgress on the sandbox spec: %v", err)
	}
	if hc.NetworkMode != "none" || !cfg.NetworkDisabled || !hc.ReadonlyRootfs || !slices.Equal(hc.CapDrop, []string{"ALL"}) {
		t.Errorf("hardening changed: network %q disabled %v ro %v capdrop %v", hc.NetworkMode, cfg.NetworkDisabled, hc.ReadonlyRootfs, hc.CapDrop)
	}
	if len(hc.Mounts) != before+1 || hc.Mounts[before].Target != EgressDir || !hc.Mounts[before].ReadOnly {
		t.Errorf("mounts %+v; want the egress directory added read-only", hc.Mounts)
	}
	if cfg.Cmd[0] != "idle" || !slices.Contains(cfg.Env, "HTTPS_PROXY="+EgressProxyURL) {
		t.Errorf("cmd %q env %q", cfg.Cmd, cfg.Env)
	}
}
