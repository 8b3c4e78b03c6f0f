package policy

// Label keys on every engine resource (container, image) this project
// creates: the one list of them. They are the only way the reconciler
// (`agent tasks gc`), `agent sandbox ls`, `agent images list` and the
// llama-server manager find their own resources, so every create sets at
// least LabelManaged and LabelKind, and everything owned by one state
// directory carries LabelState, so that a gc of one state directory never
// touches another's. The packages that create resources re-export the keys
// they use under the same names (sandbox.LabelTask, images.LabelImage...).
const (
	// LabelPrefix starts every key below.
	LabelPrefix = "dev.localagent."

	// LabelManaged is ManagedValue on every resource this project creates.
	LabelManaged = LabelPrefix + "managed"
	// LabelKind says what the resource is (a sandbox, an image check, an
	// environment build, the llama-server).
	LabelKind = LabelPrefix + "kind"
	// LabelTest marks resources created by one test so that its cleanup
	// removes exactly what it made, never other tests' resources.
	LabelTest = LabelPrefix + "test"

	// Sandboxes.
	LabelWorkspace = LabelPrefix + "workspace" // host path mounted at /workspace
	LabelTask      = LabelPrefix + "task"      // task the sandbox works for
	LabelState     = LabelPrefix + "state"     // state directory that owns it
	LabelUser      = LabelPrefix + "user"      // uid:gid it runs as
	LabelShell     = LabelPrefix + "shell"     // the bash tool's shell, when chosen
	LabelIsolation = LabelPrefix + "isolation" // "runc" or "runsc" (gVisor)
	LabelUse       = LabelPrefix + "use"       // "task", "sub-agent" or "shell"
	LabelBench     = LabelPrefix + "bench"     // made by `agent bench`

	// Warm pool members (sandbox.Pool): the pool they belong to, and what
	// they were made from, so that one made from an older image or
	// toolbox is never handed out.
	LabelPool        = LabelPrefix + "pool"         // pool key
	LabelPoolImage   = LabelPrefix + "pool.image"   // image id at create
	LabelPoolToolbox = LabelPrefix + "pool.toolbox" // toolbox fingerprint

	// Images.
	LabelImage = LabelPrefix + "image" // which project image ("sandbox", ...)
	LabelBuild = LabelPrefix + "build" // how it was built

	// Environment images.
	LabelEnvHash     = LabelPrefix + "env.hash"
	LabelEnvRepo     = LabelPrefix + "env.repo"
	LabelEnvPackages = LabelPrefix + "env.packages"

	// The managed llama-server: its settings, read back from the engine so
	// that no state file can drift from reality.
	LabelLLMPrefix   = LabelPrefix + "llm."
	LabelLLMInstance = LabelLLMPrefix + "instance" // "" for the default server
	LabelLLMSettings = LabelLLMPrefix + "settings" // hash of every setting
	LabelLLMModel    = LabelLLMPrefix + "model"    // host path of the model file
	LabelLLMPort     = LabelLLMPrefix + "port"     // host port on 127.0.0.1
	LabelLLMCtx      = LabelLLMPrefix + "ctx"      // total context (-c)
	LabelLLMParallel = LabelLLMPrefix + "parallel" // slots (-np)
	LabelLLMGPUs     = LabelLLMPrefix + "gpus"     // GPUs.String()
	LabelLLMOwner    = LabelLLMPrefix + "owner"    // whose server this is
	LabelLLMStateDir = LabelLLMPrefix + "state_dir"
	LabelLLMBackend  = LabelLLMPrefix + "backend" // ggml backend of the image

	// ManagedValue is the value of LabelManaged.
	ManagedValue = "true"
)
