// Package failpoint lets fault-injection tests stop the agent process at a
// named point of a task or merge, the way a crash, a closed terminal or a
// kill would.
//
// Production code calls Hit("name") at each point where the process may die
// between two changes on disk. Nothing happens unless the environment
// variable AGENT_FAILPOINT names that point; then the process sends itself
// the signal named by AGENT_FAILPOINT_SIGNAL (KILL by default; TERM or INT
// exercise the graceful path). With KILL nothing after the point runs, so
// the test sees exactly what a crash there leaves behind.
//
// It must never do anything else: no config, no files, no delays.
package failpoint
