package cli

import (
	"fmt"
	"sync"

	"github.com/docker/docker/client"
	"github.com/spf13/pflag"

	"github.com/localagent/agent/cmd/agent/internal/termtext"
)

// Factory holds the dependencies commands share. Everything expensive is
// built lazily on first use, so --help and flag parsing never touch the
// Docker daemon or read configuration files.
type Factory struct {
	IO *IOStreams

	conf *configLoader

	dockerOnce sync.Once
	docker     *client.Client
	dockerErr  error
}

// NewFactory returns a Factory over the given streams.
func NewFactory(ios *IOStreams) *Factory {
	return &Factory{IO: ios, conf: newConfigLoader()}
}

// Config loads the configuration (once).
// Warnings found while loading (keys a project config may not set) are
// printed once, to stderr.
func (f *Factory) Config() (*Config, error) {
	first := f.conf.cfg == nil && f.conf.err == nil
	cfg, err := f.conf.load()
	if first && cfg != nil {
		for _, w := range cfg.Warnings {
			fmt.Fprintf(f.IO.ErrOut, "agent: warning: %s\n", termtext.Line(w))
		}
	}
	return cfg, err
}

// BindFlag makes fl override the configuration key when the user sets it.
func (f *Factory) BindFlag(key string, fl *pflag.Flag) { f.conf.bind(key, fl) }

// SetProjectDir says which directory's .agent/config.yaml applies (the
// repository a command works on); by default the working directory. The
// command resolves it (projectDir, taskProjectDir) before the
// configuration is loaded, so loading it only reads files: no git runs
// behind a config lookup.
func (f *Factory) SetProjectDir(dir string) { f.conf.projDir = dir }

// Docker returns a client for the local engine. It negotiates the API
// version (the engine may be older than the SDK) on its first request, so
// building it costs no round trip: sandbox.New pings the engine anyway.
func (f *Factory) Docker() (*client.Client, error) {
	f.dockerOnce.Do(func() {
		c, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
		if err != nil {
			f.dockerErr = fmt.Errorf("docker client: %w", err)
			return
		}
		f.docker = c
	})
	return f.docker, f.dockerErr
}

// Close releases what the factory opened.
func (f *Factory) Close() {
	if f.docker != nil {
		_ = f.docker.Close()
	}
}
