package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/localagent/agent/cmd/agent/internal/termtext"
	"github.com/localagent/agent/orchestrator"
	"github.com/localagent/agent/orchestrator/worktree"
)

// MemoryOptions are the inputs of `agent memory`.
type MemoryOptions struct {
	IO      *IOStreams
	Factory *Factory
	Repo    string
	Edit    bool
}

// NewCmdMemory builds `agent memory [--edit]`.
func NewCmdMemory(f *Factory, runF func(context.Context, *MemoryOptions) error) *cobra.Command {
	opts := &MemoryOptions{IO: f.IO, Factory: f}
	cmd := &cobra.Command{
		Use: "memory",
		Example: `  agent memory
  agent memory --repo ~/src/app
  agent memory --edit`,
		Short: "Show (or edit) what the agent remembers about a repository",
		Long: `Show the notes the agent saved about a repository with its remember tool.
They are read into the system prompt at the start of every task on that
repository. They live in the state directory, never in the repository.
--edit opens the file in $VISUAL or $EDITOR (default vi).

Project instructions are a different thing: the first of AGENTS.md,
AGENT.md, CLAUDE.md or .agent/instructions.md at the repository's root is
read (inside the sandbox) into every task's system prompt; they are part of
the repository and of its review.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return memoryRun(cmd.Context(), opts)
		},
	}
	cmd.Flags().StringVar(&opts.Repo, "repo", ".", "the repository")
	cmd.Flags().BoolVar(&opts.Edit, "edit", false, "edit the memory in $VISUAL or $EDITOR")
	return cmd
}

func memoryRun(ctx context.Context, opts *MemoryOptions) error {
	cfg, err := opts.Factory.Config()
	if err != nil {
		return err
	}
	repo, err := worktree.Open(ctx, opts.Repo)
	if err != nil {
		return err
	}
	path := orchestrator.MemoryPath(cfg.StateDir, repo.CommonDir)
	if opts.Edit {
		if !opts.IO.CanPrompt() {
			return errors.New("agent memory --edit needs a terminal; the memory file is " + path)
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return err
		}
		f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY, 0o600)
		if err != nil {
			return err
		}
		f.Close()
		editor := os.Getenv("VISUAL")
		if editor == "" {
			editor = os.Getenv("EDITOR")
		}
		if editor == "" {
			editor = "vi"
		}
		// As git runs it: the user's own setting, through the shell, with
		// the file as an argument (never spliced into the command line).
		c := exec.CommandContext(ctx, "/bin/sh", "-c", editor+` "$@"`, editor, path)
		c.Stdin, c.Stdout, c.Stderr = opts.IO.In, opts.IO.Out, opts.IO.ErrOut
		return c.Run()
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) || (err == nil && len(strings.TrimSpace(string(b))) == 0) {
		fmt.Fprintf(opts.IO.ErrOut, "no memory yet for %s (the agent saves notes with its remember tool)\n", termtext.Path(repo.Root))
		return nil
	}
	if err != nil {
		return err
	}
	fmt.Fprint(opts.IO.Out, termtext.Text(string(b)))
	fmt.Fprintf(opts.IO.ErrOut, "(%s)\n", termtext.Path(path))
	return nil
}
