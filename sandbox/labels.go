package sandbox

// Label keys put on every Docker resource this project creates. They are the
// only way the reconciler (`agent tasks gc`) and `agent sandbox ls` find
// their own resources, so every create sets at least LabelManaged and
// LabelKind, and everything owned by one state directory carries its
// LabelState so that a gc of one state directory never touches another's.
const (
	// LabelManaged is "true" on every resource this project creates.
	LabelManaged = "dev.localagent.managed"
	// LabelKind says what the resource is (KindSandbox, ...).
	LabelKind = "dev.localagent.kind"
	// LabelWorkspace is the absolute host path bind-mounted at /workspace.
	LabelWorkspace = "dev.localagent.workspace"
	// LabelTask is the id of the task the sandbox works for (set by the
	// orchestrator through Spec.Labels or Spec.Task).
	LabelTask = "dev.localagent.task"
	// LabelState identifies the state directory that owns the resource.
	LabelState = "dev.localagent.state"
	// LabelUser is the uid:gid the sandbox runs as.
	LabelUser = "dev.localagent.user"
	// LabelShell is the shell the bash tool uses, when it was chosen
	// explicitly (Spec.Shell).
	LabelShell = "dev.localagent.shell"
	// LabelUse says which user of a task created the sandbox: "task",
	// "sub-agent" or "shell" (set by the orchestrator through Spec.Labels).
	LabelUse = "dev.localagent.use"
	// LabelTest marks resources created by one test so that its cleanup
	// removes exactly what it made, never other tests' resources.
	LabelTest = "dev.localagent.test"
	// LabelBench marks containers made by `agent bench`.
	LabelBench = "dev.localagent.bench"
)

// Label values.
const (
	// ManagedValue is the value of LabelManaged.
	ManagedValue = "true"
	// KindSandbox is the LabelKind of a workspace container.
	KindSandbox = "sandbox"
)
