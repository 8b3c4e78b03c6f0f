// Package llamaserver owns the lifecycle of the managed llama-server
// container: building its hardened container spec (GPU passthrough through
// the engine's device requests, CDI or device nodes; the model directory
// read-only; the port on 127.0.0.1 only), starting it idempotently, gating
// readiness on /health, explaining why a start failed, reporting status
// (slots, per-slot context, and the devices, offloaded layers and VRAM its
// log shows) and removing it.
//
// A server belongs to a state directory (Owner): its name and labels carry
// the directory's id, so users sharing an engine never replace or remove
// each other's server. llm.gpus auto is resolved here (ResolveGPUs) from
// the engine's GPU runtime and the images' backend labels, so a GPU is
// never reserved for a server that cannot use it.
//
// It talks to the engine through the small engine interface only, reports
// progress as events (never to the terminal) and never pulls an image: a
// missing image is an error that names the command which builds it.
package llamaserver
