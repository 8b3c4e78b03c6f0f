package cli

import (
	"context"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/localagent/agent/cmd/agent/internal/termtext"
	"github.com/localagent/agent/compose"
	"github.com/localagent/agent/orchestrator/llamaserver"
)

// NewCmdCompose builds `agent compose`.
func NewCmdCompose(f *Factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "compose",
		Short: "Render the compose file of the llama-server stack",
		Example: `  agent compose render -o compose.yaml --model ~/models/model.gguf
  docker compose -f compose.yaml up -d`,
	}
	cmd.AddCommand(NewCmdComposeRender(f, nil))
	return cmd
}

// ComposeRenderOptions are the inputs of `agent compose render`.
type ComposeRenderOptions struct {
	IO      *IOStreams
	Factory *Factory
	Server  llamaserver.Options
	Output  string
}

// NewCmdComposeRender builds `agent compose render`.
func NewCmdComposeRender(f *Factory, runF func(context.Context, *ComposeRenderOptions) error) *cobra.Command {
	opts := &ComposeRenderOptions{IO: f.IO, Factory: f}
	var lf *llmFlags
	cmd := &cobra.Command{
		Use:   "render [-o FILE] [--model FILE] [--gpus ...] [-- LLAMA_ARGS...]",
		Short: "Write the compose file equivalent to `agent llm up` with the same settings",
		Example: `  agent compose render --model ~/models/model.gguf --gpus 0
  agent compose render -o compose.yaml -- --flash-attn on`,
		Long: `Write a compose file that runs the same hardened llama-server as 'agent llm up':
model directory read-only, port on 127.0.0.1 only, GPU reservation, a /health
healthcheck that works without curl in the image. The file is validated with the
compose specification's loader before it is written.`,
		Args: llamaServerArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			var err error
			if opts.Server, err = lf.options(f, args); err != nil {
				return err
			}
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return composeRenderRun(cmd.Context(), opts)
		},
	}
	lf = addLLMFlags(cmd)
	cmd.Flags().StringVarP(&opts.Output, "output", "o", "", "write to `FILE` instead of standard output")
	return cmd
}

func composeRenderRun(ctx context.Context, opts *ComposeRenderOptions) error {
	o := opts.Server
	if err := o.ResolveModel(); err != nil {
		return fmt.Errorf("%w: pass the path of a .gguf file with --model", err)
	}
	// The engine says whether the image brings its own entrypoint and the
	// host which devices exist; without an engine the file is still
	// useful, written for this project's own image.
	img, host := llamaserver.ImageFacts{}, llamaserver.DefaultHostFacts(o.ModelFile)
	if c, derr := opts.Factory.Docker(); derr == nil {
		o2, i, h, ferr := llamaserver.New(c, nil).Facts(ctx, o)
		if ferr != nil {
			fmt.Fprintf(opts.IO.ErrOut, "warning: %s\n", termtext.Line(ferr.Error()))
		} else {
			o, img, host = o2, i, h
		}
	}
	if mc, err := llamaserver.CheckModel(o.Model, o.Ctx, o.Parallel); err != nil {
		fmt.Fprintf(opts.IO.ErrOut, "warning: %s\n", termtext.Line(err.Error()))
	} else {
		for _, w := range mc.Warnings {
			fmt.Fprintf(opts.IO.ErrOut, "warning: %s\n", termtext.Line(w))
		}
	}
	data, err := compose.Render(llamaserver.Stack(o, img, host))
	if err != nil {
		return err
	}
	if _, err := compose.Validate(ctx, data); err != nil {
		return fmt.Errorf("the rendered compose file does not validate (please report this): %w", err)
	}
	if opts.Output == "" || opts.Output == "-" {
		_, err = opts.IO.Out.Write(data)
		return err
	}
	if err := os.WriteFile(opts.Output, data, 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", opts.Output, err)
	}
	fmt.Fprintf(opts.IO.ErrOut, "wrote %s; start it with `docker compose -p %s -f %s up -d`\n", opts.Output, compose.ProjectName, opts.Output)
	return nil
}
