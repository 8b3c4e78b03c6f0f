// Package kubernetes is a sandbox backend that runs each sandbox as a pod:
// it implements sandbox.Backend and sandbox.Driver against client-go, so
// that the orchestrator, which sees engines only through those interfaces,
// can drive a cluster instead of the local Docker engine.
//
// It is its own Go module, so that the agent binary does not carry
// client-go; nothing in the main module imports it. It is compiled, vetted
// and unit-tested (pod spec, labels, listing, state and error mapping
// against the fake clientset) by `make kube-check`, and has never run
// against a cluster: see docs/kubernetes-backend.md for what it does, what
// it refuses and what a cluster needs for it.
//
// A pod per sandbox runs under a RuntimeClass (gVisor, Kata) with the
// Docker sandbox's hardening in securityContext form (Pod); its labels are
// Spec.SandboxLabels; exec and the toolbox session go through the
// pods/exec subresource; the task's files arrive through a Delivery. A pod
// cannot be paused, so Freeze refuses on a running pod (see
// Backend.Freeze).
package kubernetes
