// Command agent is a sandboxed local coding agent: it runs a model through
// llama-server, works on a task in a hardened container and hands back a
// reviewable git branch.
package main

import (
	"os"

	"github.com/localagent/agent/cmd/agent/cli"
)

func main() { os.Exit(cli.Main(os.Args[1:], cli.System())) }
