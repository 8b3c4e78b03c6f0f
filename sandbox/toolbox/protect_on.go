//go:build !agent_insecure_dumpable

package toolbox

// insecureDumpable is false in every real build; see protect_off.go.
const insecureDumpable = false
