package cli

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"github.com/spf13/viper"
)

// Config is the whole typed configuration. Precedence, highest first:
// command-line flags > AGENT_* environment variables > the project's
// .agent/config.yaml > the user's $XDG_CONFIG_HOME/agent/config.yaml >
// defaults. Keys are the mapstructure names joined with dots
// (sandbox.image ↔ AGENT_SANDBOX_IMAGE).
type Config struct {
	// StateDir holds task records, sessions, logs and worktrees.
	StateDir string        `mapstructure:"state_dir"`
	Sandbox  SandboxConfig `mapstructure:"sandbox"`
	LLM      LLMConfig     `mapstructure:"llm"`
	Agent    AgentConfig   `mapstructure:"agent"`
	Images   ImagesConfig  `mapstructure:"images"`
}

// SandboxConfig configures the workspace containers.
type SandboxConfig struct {
	Image   string  `mapstructure:"image"`
	Memory  string  `mapstructure:"memory"` // e.g. "4g"
	CPUs    float64 `mapstructure:"cpus"`
	Pids    int64   `mapstructure:"pids"`
	Tmpfs   string  `mapstructure:"tmpfs"` // size of /tmp and the home tmpfs
	Toolbox string  `mapstructure:"toolbox"`
	Runtime string  `mapstructure:"runtime"` // "" = engine default (runc); e.g. "runsc"
	// Seccomp is "default" (the engine's profile) or "strict" (the
	// project's allowlist, policy.StrictSeccomp).
	Seccomp string `mapstructure:"seccomp"`
	// Shell runs the bash tool; "" = /bin/bash when the image has it, else /bin/sh.
	Shell string `mapstructure:"shell"`
	// Egress lists the hosts a task's sandbox may reach through the
	// policy-enforcing proxy (policy.ParseEgress syntax: "example.com",
	// "*.example.com", "host:8443"). Empty, the default, means no network at
	// all.
	Egress []string `mapstructure:"egress"`
}

// LLMConfig configures the model endpoint and the managed llama-server.
type LLMConfig struct {
	// URL of an OpenAI-compatible server; empty means the managed
	// llama-server on 127.0.0.1:Port.
	URL          string        `mapstructure:"url"`
	APIKey       string        `mapstructure:"api_key"`
	Model        string        `mapstructure:"model"`
	Image        string        `mapstructure:"image"`
	Port         int           `mapstructure:"port"`
	Ctx          int           `mapstructure:"ctx"`
	Parallel     int           `mapstructure:"parallel"`
	GPUs         string        `mapstructure:"gpus"`
	StartTimeout time.Duration `mapstructure:"start_timeout"`
}

// AgentConfig configures the agent loop.
type AgentConfig struct {
	MaxIterations int `mapstructure:"max_iterations"`
	// ToolMode is how tools are offered to the model: auto (native tool
	// calls, falling back to text when the server rejects them), native or
	// text.
	ToolMode string      `mapstructure:"tool_mode"`
	Hooks    HooksConfig `mapstructure:"hooks"`
}

// HooksConfig lists shell commands run inside the sandbox at points of the
// loop. A non-zero exit of a pre_tool hook blocks the tool call.
type HooksConfig struct {
	SessionStart []string `mapstructure:"session_start"`
	PreTool      []string `mapstructure:"pre_tool"`
	PostTool     []string `mapstructure:"post_tool"`
}

// ImagesConfig configures offline image builds.
type ImagesConfig struct {
	// Mirror is the Debian mirror debootstrap uses ("" = the host's apt mirror or deb.debian.org).
	Mirror string `mapstructure:"mirror"`
}

func setDefaults(v *viper.Viper) {
	v.SetDefault("state_dir", defaultStateDir())
	v.SetDefault("sandbox.image", "agent/sandbox:latest")
	v.SetDefault("sandbox.memory", "4g")
	v.SetDefault("sandbox.cpus", 2.0)
	v.SetDefault("sandbox.pids", 512)
	v.SetDefault("sandbox.tmpfs", "1g")
	v.SetDefault("sandbox.toolbox", "")
	v.SetDefault("sandbox.runtime", "")
	v.SetDefault("sandbox.seccomp", "default")
	v.SetDefault("sandbox.shell", "")
	v.SetDefault("sandbox.egress", []string{})
	v.SetDefault("llm.url", "")
	v.SetDefault("llm.api_key", "")
	v.SetDefault("llm.model", "")
	v.SetDefault("llm.image", "agent/llama-server:cpu")
	v.SetDefault("llm.port", 8080)
	v.SetDefault("llm.ctx", 16384)
	v.SetDefault("llm.parallel", 2)
	v.SetDefault("llm.gpus", "all")
	v.SetDefault("llm.start_timeout", 300*time.Second)
	v.SetDefault("agent.max_iterations", 25)
	v.SetDefault("agent.tool_mode", "auto")
	v.SetDefault("agent.hooks.session_start", []string{})
	v.SetDefault("agent.hooks.pre_tool", []string{})
	v.SetDefault("agent.hooks.post_tool", []string{})
	v.SetDefault("images.mirror", "")
}

func defaultStateDir() string {
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "agent")
	}
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, ".local", "state", "agent")
	}
	return filepath.Join(os.TempDir(), "agent-state")
}

func userConfigFile() string {
	if d := os.Getenv("XDG_CONFIG_HOME"); d != "" {
		return filepath.Join(d, "agent", "config.yaml")
	}
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, ".config", "agent", "config.yaml")
	}
	return ""
}

// configLoader collects flag bindings while commands are built and loads the
// configuration once, on first use, so --help never reads a file.
type configLoader struct {
	v       *viper.Viper
	projDir func() string // directory whose .agent/config.yaml applies
	cfg     *Config
	err     error
}

func newConfigLoader() *configLoader {
	v := viper.New()
	setDefaults(v)
	v.SetEnvPrefix("AGENT")
	v.SetEnvKeyReplacer(strings.NewReplacer(".", "_"))
	v.AutomaticEnv()
	return &configLoader{v: v, projDir: func() string { d, _ := os.Getwd(); return d }}
}

// bind makes a flag set the config key when the user gives it.
func (l *configLoader) bind(key string, fl *pflag.Flag) {
	if fl == nil {
		panic("config: binding a flag that does not exist: " + key)
	}
	if err := l.v.BindPFlag(key, fl); err != nil {
		panic(err)
	}
}

func (l *configLoader) load() (*Config, error) {
	if l.cfg != nil || l.err != nil {
		return l.cfg, l.err
	}
	l.cfg, l.err = l.read()
	return l.cfg, l.err
}

func (l *configLoader) read() (*Config, error) {
	files := []string{userConfigFile()}
	if d := l.projDir(); d != "" {
		files = append(files, filepath.Join(d, ".agent", "config.yaml"))
	}
	for _, f := range files {
		if f == "" {
			continue
		}
		if _, err := os.Stat(f); errors.Is(err, os.ErrNotExist) {
			continue
		}
		l.v.SetConfigFile(f)
		if err := l.v.MergeInConfig(); err != nil {
			return nil, fmt.Errorf("reading config %s: %w", f, err)
		}
	}
	var c Config
	if err := l.v.Unmarshal(&c); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	if c.StateDir == "" {
		return nil, errors.New("config: state_dir is empty")
	}
	abs, err := filepath.Abs(c.StateDir)
	if err != nil {
		return nil, fmt.Errorf("config: state_dir: %w", err)
	}
	c.StateDir = abs
	return &c, nil
}
