package sandbox

import "github.com/localagent/agent/policy"

// Label keys (policy holds the one list) put on every sandbox. They are the
// only way the reconciler (`agent tasks gc`) and `agent sandbox ls` find
// their own resources, so every create sets at least LabelManaged and
// LabelKind, and everything owned by one state directory carries its
// LabelState so that a gc of one state directory never touches another's.
const (
	// LabelManaged is "true" on every resource this project creates.
	LabelManaged = policy.LabelManaged
	// LabelKind says what the resource is (KindSandbox, ...).
	LabelKind = policy.LabelKind
	// LabelWorkspace is the absolute host path bind-mounted at /workspace.
	LabelWorkspace = policy.LabelWorkspace
	// LabelTask is the id of the task the sandbox works for (set by the
	// orchestrator through Spec.Labels or Spec.Task).
	LabelTask = policy.LabelTask
	// LabelState identifies the state directory that owns the resource.
	LabelState = policy.LabelState
	// LabelUser is the uid:gid the sandbox runs as.
	LabelUser = policy.LabelUser
	// LabelShell is the shell the bash tool uses, when it was chosen
	// explicitly (Spec.Shell).
	LabelShell = policy.LabelShell
	// LabelIsolation is the sandbox's isolation, "runc" or "runsc"
	// (Spec.Isolation).
	LabelIsolation = policy.LabelIsolation
	// LabelUse says which user of a task created the sandbox: "task",
	// "sub-agent" or "shell" (set by the orchestrator through Spec.Labels).
	LabelUse = policy.LabelUse
	// LabelTest marks resources created by one test so that its cleanup
	// removes exactly what it made, never other tests' resources.
	LabelTest = policy.LabelTest
	// LabelBench marks containers made by `agent bench`.
	LabelBench = policy.LabelBench
	// LabelPool is the key of the warm pool a member belongs to (see
	// Pool); LabelPoolImage and LabelPoolToolbox record the image id and
	// toolbox it was made from.
	LabelPool        = policy.LabelPool
	LabelPoolImage   = policy.LabelPoolImage
	LabelPoolToolbox = policy.LabelPoolToolbox
)

// Label values.
const (
	// ManagedValue is the value of LabelManaged.
	ManagedValue = policy.ManagedValue
	// KindSandbox is the LabelKind of a workspace container.
	KindSandbox = "sandbox"
)
