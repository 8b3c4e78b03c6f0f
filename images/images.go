package images

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

// Label keys set on every image built here.
const (
	// LabelImage names which project image this is ("sandbox", "busybox",
	// "llama-server"); List and Save find project images by it.
	LabelImage = "dev.localagent.image"
	// LabelBuild records how the image was built (tool, suite, mirror,
	// time), so an image found on a machine says where it came from.
	LabelBuild = "dev.localagent.build"
)
