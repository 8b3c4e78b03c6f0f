package images

import (
	"fmt"
	"strings"

	"github.com/localagent/agent/policy"
)

// Image references the project builds. Other packages and tests use these
// constants rather than spelling the tags out, so a rename happens here once.
const (
	// Sandbox is the default workspace image: Debian bookworm minbase with
	// git, bash, coreutils, findutils, grep, ca-certificates and procps.
	Sandbox = "agent/sandbox:latest"
	// Busybox is a tiny image (static busybox only) for fast tests.
	Busybox = "agent/busybox:latest"
	// LlamaServer is llama.cpp's llama-server (CPU build) from Debian sid.
	LlamaServer = "agent/llama-server:cpu"
)

// llama-server backends: which ggml backend library an image carries. The
// tag of a llama-server image is its backend (agent/llama-server:cuda).
const (
	BackendCPU    = "cpu"
	BackendCUDA   = "cuda"
	BackendVulkan = "vulkan"
)

// Backends are the llama-server backends `agent images build llama-server
// --backend` accepts, CPU first.
func Backends() []string { return []string{BackendCPU, BackendCUDA, BackendVulkan} }

// LlamaServerRef is the fixed tag of the llama-server image of backend.
func LlamaServerRef(backend string) string { return "agent/llama-server:" + backend }

// IsGPUBackend reports whether backend runs on a GPU.
func IsGPUBackend(backend string) bool { return backend == BackendCUDA || backend == BackendVulkan }

// Label keys set on every image built here.
const (
	// LabelImage names which project image this is ("sandbox", "busybox",
	// "llama-server"); List and Save find project images by it.
	LabelImage = policy.LabelImage
	// LabelBuild records how the image was built (tool, suite, mirror,
	// time), so an image found on a machine says where it came from.
	LabelBuild = policy.LabelBuild
	// LabelBackend is set on llama-server images: the ggml backend they
	// carry (BackendCPU, BackendCUDA, BackendVulkan). The managed server
	// reads it to refuse a GPU request an image cannot serve, and to pick
	// a GPU image when llm.gpus is auto.
	LabelBackend = policy.LabelLLMBackend
	// LabelTest marks resources a test created, with a value unique to
	// that test, so cleanup removes exactly what the test made.
	LabelTest = policy.LabelTest
	// LabelManaged and LabelKind are the project-wide keys every
	// container carries (policy holds the one list). They are set on the
	// short-lived container that checks a new image.
	LabelManaged = policy.LabelManaged
	LabelKind    = policy.LabelKind
	// KindImageCheck is the LabelKind of that container.
	KindImageCheck = "image-check"
)

// Names of the images, as `agent images build NAME` takes them.
const (
	NameBusybox     = "busybox"
	NameSandbox     = "sandbox"
	NameLlamaServer = "llama-server"
)

// Definition describes one image the project builds.
type Definition struct {
	// Name is the short name used on the command line and in LabelImage.
	Name string
	// Ref is the fixed tag the image is built under.
	Ref string
	// Description says in a few words what the image holds.
	Description string
	// Backend is the llama-server backend ("" for other images).
	Backend string
}

// Definitions returns every project image in build order (the quickest
// first, so `build all` fails early on a broken setup).
func Definitions() []Definition {
	return []Definition{
		{Name: NameBusybox, Ref: Busybox, Description: "static busybox, for fast tests"},
		{Name: NameSandbox, Ref: Sandbox, Description: "Debian bookworm minbase with git and a shell, the default sandbox"},
		{Name: NameLlamaServer, Ref: LlamaServer, Description: "llama.cpp llama-server (CPU) from Debian sid", Backend: BackendCPU},
	}
}

// LlamaServerDefinition is the llama-server image of backend. The GPU
// builds are not among Definitions: `build all` should not download the
// CUDA libraries (~1 GB) for a machine that may have no GPU.
func LlamaServerDefinition(backend string) (Definition, error) {
	switch backend {
	case "", BackendCPU:
		d, _ := Lookup(NameLlamaServer)
		return d, nil
	case BackendCUDA:
		return Definition{Name: NameLlamaServer, Ref: LlamaServerRef(BackendCUDA), Backend: BackendCUDA,
			Description: "llama.cpp llama-server with the CUDA backend (Debian sid contrib/non-free; the driver library comes from the NVIDIA runtime)"}, nil
	case BackendVulkan:
		return Definition{Name: NameLlamaServer, Ref: LlamaServerRef(BackendVulkan), Backend: BackendVulkan,
			Description: "llama.cpp llama-server with the Vulkan backend (Debian sid; NVIDIA via the runtime, AMD/Intel via Mesa)"}, nil
	}
	return Definition{}, fmt.Errorf("unknown llama-server backend %q: choose one of %s", backend, strings.Join(Backends(), ", "))
}

// Lookup finds a definition by name ("sandbox") or by ref
// ("agent/sandbox:latest").
func Lookup(nameOrRef string) (Definition, bool) {
	for _, d := range Definitions() {
		if d.Name == nameOrRef || d.Ref == nameOrRef {
			return d, true
		}
	}
	for _, b := range Backends()[1:] {
		if d, _ := LlamaServerDefinition(b); d.Ref == nameOrRef {
			return d, true
		}
	}
	return Definition{}, false
}

// Names returns the short names of all project images.
func Names() []string {
	var out []string
	for _, d := range Definitions() {
		out = append(out, d.Name)
	}
	return out
}

// FixCommand returns the command that makes ref present, for error
// messages elsewhere ("image agent/sandbox:latest is missing: run ...").
// For an image the project does not build it points at loading a bundle.
func FixCommand(ref string) string {
	if d, ok := Lookup(ref); ok {
		if IsGPUBackend(d.Backend) {
			return "agent images build " + d.Name + " --backend " + d.Backend
		}
		return "agent images build " + d.Name
	}
	return "agent images load -i FILE (a bundle or `docker save` archive containing " + ref + ")"
}

// MissingError says that an image is not present in the engine and how to
// get it. The engine never pulls, so this is the whole story.
type MissingError struct{ Ref string }

func (e *MissingError) Error() string {
	return fmt.Sprintf("image %s is not present: run `%s` (images are never pulled)", e.Ref, FixCommand(e.Ref))
}

// validName reports an unknown image name with the list of known ones.
func validName(name string) (Definition, error) {
	d, ok := Lookup(name)
	if !ok {
		return Definition{}, fmt.Errorf("unknown image %q: choose one of %s", name, strings.Join(Names(), ", "))
	}
	return d, nil
}
