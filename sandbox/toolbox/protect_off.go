//go:build agent_insecure_dumpable

package toolbox

// insecureDumpable turns Protect into a no-op. It exists only so that the
// security tests can build a toolbox without the defence (go build -tags
// agent_insecure_dumpable) and show that their attack works against it:
// the tag is never set by the Makefile, the images or any release build.
const insecureDumpable = true
