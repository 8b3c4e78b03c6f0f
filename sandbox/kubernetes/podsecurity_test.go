package kubernetes

import (
	"testing"

	psapi "k8s.io/pod-security-admission/api"
	pspolicy "k8s.io/pod-security-admission/policy"

	"github.com/localagent/agent/sandbox"
)

// restrictedViolations are the reasons the Pod Security Standards'
// "restricted" level (the admission plugin's own checks) gives for
// refusing pod.
func restrictedViolations(t *testing.T, spec sandbox.Spec) []string {
	t.Helper()
	ev, err := pspolicy.NewEvaluator(pspolicy.DefaultChecks(), nil)
	if err != nil {
		t.Fatal(err)
	}
	pod, err := testPod(t, spec, sandbox.UserChoice{UID: 1000, GID: 1000})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range ev.EvaluatePod(psapi.LevelVersion{Level: psapi.LevelRestricted, Version: psapi.LatestVersion()}, &pod.ObjectMeta, &pod.Spec) {
		if !r.Allowed {
			out = append(out, r.ForbiddenReason+": "+r.ForbiddenDetail)
		}
	}
	return out
}

// A sandbox pod passes Pod Security admission at the "restricted" level,
// so a namespace can enforce it. Control: the same pod with privilege
// escalation allowed is refused, so the evaluator does check.
func TestPodPassesRestrictedPodSecurity(t *testing.T) {
	for _, engineSeccomp := range []bool{false, true} {
		spec := baseSpec(t)
		spec.EngineSeccomp = engineSeccomp
		if v := restrictedViolations(t, spec); len(v) > 0 {
			t.Errorf("EngineSeccomp=%v: restricted refuses the sandbox pod: %q", engineSeccomp, v)
		}
	}

	ev, _ := pspolicy.NewEvaluator(pspolicy.DefaultChecks(), nil)
	pod, _ := testPod(t, baseSpec(t), sandbox.UserChoice{UID: 1000, GID: 1000})
	yes := true
	pod.Spec.Containers[0].SecurityContext.AllowPrivilegeEscalation = &yes
	refused := false
	for _, r := range ev.EvaluatePod(psapi.LevelVersion{Level: psapi.LevelRestricted, Version: psapi.LatestVersion()}, &pod.ObjectMeta, &pod.Spec) {
		refused = refused || !r.Allowed
	}
	if !refused {
		t.Error("control: restricted accepts a pod that allows privilege escalation")
	}
}
