package cli

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"github.com/spf13/viper"

	"github.com/localagent/agent/agent"
	"github.com/localagent/agent/orchestrator"
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
	Env      EnvConfig     `mapstructure:"env"`
	MCP      MCPConfig     `mapstructure:"mcp"`

	// Warnings are problems found while loading that did not stop it (keys
	// a project config may not set).
	Warnings []string `mapstructure:"-"`
}

// MCPConfig declares MCP servers, each run inside the task's sandbox.
type MCPConfig struct {
	Servers map[string]orchestrator.MCPServerConfig `mapstructure:"servers"`
}

// SandboxConfig configures the workspace containers.
type SandboxConfig struct {
	Image  string  `mapstructure:"image"`
	Memory string  `mapstructure:"memory"` // e.g. "4g"
	CPUs   float64 `mapstructure:"cpus"`
	Pids   int64   `mapstructure:"pids"`
	Tmpfs  string  `mapstructure:"tmpfs"` // size of /tmp and the home tmpfs
	// Disk bounds a task's workspace (the worktree on the host disk); a
	// task that grows it past the bound is stopped, its work so far
	// committed. "0" switches the bound off.
	Disk string `mapstructure:"disk"`
	// MinFree is the free space the state directory's file system must
	// keep while a task runs; "0" switches the floor off.
	MinFree string `mapstructure:"min_free"`
	// GPUReserve is the free GPU memory the managed model server must
	// keep on a GPU that `task --gpus` also gives a task's sandbox; "0"
	// switches the check off.
	GPUReserve string `mapstructure:"gpu_reserve"`
	Toolbox    string `mapstructure:"toolbox"`
	// Isolation is "runc" (the default: namespaces, capabilities,
	// seccomp) or "runsc" (gVisor).
	Isolation string `mapstructure:"isolation"`
	// Runtime is the engine's name of the runtime giving the isolation:
	// "" = the engine default for runc, "runsc" for runsc.
	Runtime string `mapstructure:"runtime"`
	// Seccomp is "strict" (the project's allowlist, policy.StrictSeccomp,
	// the default) or "default" (the engine's profile, the opt-out).
	Seccomp string `mapstructure:"seccomp"`
	// Shell runs the bash tool; "" = /bin/bash when the image has it, else /bin/sh.
	Shell string `mapstructure:"shell"`
	// Egress lists the hosts a task's sandbox may reach through the
	// policy-enforcing proxy (policy.ParseEgress syntax: "example.com",
	// "*.example.com", "host:8443"). Empty, the default, means no network at
	// all.
	Egress []string `mapstructure:"egress"`
	// SpareCheckouts is how many spare checkouts (a commit checked out
	// ahead of time, which the next task on it takes over instead of
	// writing every file) are kept; 0 makes none.
	SpareCheckouts int `mapstructure:"spare_checkouts"`
	// Pool is how many started sandboxes wait, per set of sandbox
	// settings in use, for the next task or sub-agent to claim; 0 keeps
	// none.
	Pool int `mapstructure:"pool"`
}

// LLMConfig configures the model endpoint and the managed llama-server.
type LLMConfig struct {
	// URL of an OpenAI-compatible server; empty means the managed
	// llama-server on 127.0.0.1:Port.
	URL    string `mapstructure:"url"`
	APIKey string `mapstructure:"api_key"`
	// Model is the .gguf file `agent llm up` serves (and doctor checks).
	Model string `mapstructure:"model"`
	// ServedModel is the model name a task asks the server for ("" = the
	// server's default): a name, not a file.
	ServedModel  string        `mapstructure:"served_model"`
	Image        string        `mapstructure:"image"`
	Port         int           `mapstructure:"port"`
	Ctx          int           `mapstructure:"ctx"`
	Parallel     int           `mapstructure:"parallel"`
	GPUs         string        `mapstructure:"gpus"`
	StartTimeout time.Duration `mapstructure:"start_timeout"`
	// StallTimeout ends a reply that makes no progress for this long
	// (keep-alive comments are not progress); ReplyTimeout bounds one reply.
	// The task is then interrupted and can be resumed.
	StallTimeout time.Duration `mapstructure:"stall_timeout"`
	ReplyTimeout time.Duration `mapstructure:"reply_timeout"`
}

// AgentConfig configures the agent loop.
type AgentConfig struct {
	MaxIterations int `mapstructure:"max_iterations"`
	// Test is the test command run in the task's sandbox after the
	// agent's last turn; its result is the review's verdict and the only
	// input of merge-if-green ("" = the project environment's test:).
	Test string `mapstructure:"test"`
	// TestTimeout bounds that run.
	TestTimeout time.Duration `mapstructure:"test_timeout"`
	// ToolMode is how tools are offered to the model: auto (native tool
	// calls, falling back to text when the server rejects them), native or
	// text.
	ToolMode string `mapstructure:"tool_mode"`
	// SubAgents offers the model the spawn_agents tool (each sub-agent in
	// its own worktree and sandbox, as many at once as the server has slots).
	SubAgents bool        `mapstructure:"sub_agents"`
	Hooks     HooksConfig `mapstructure:"hooks"`
	// Types are custom sub-agent types for spawn_agents (tools as names or
	// patterns, max_turns, read_only, no_merge), added to explore, plan,
	// code and verify.
	Types map[string]agent.AgentType `mapstructure:"types"`
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

// EnvConfig configures project environments. A repository's config cannot
// set any of it (env.* is not among projectKeys).
type EnvConfig struct {
	// Off ignores environment definitions: tasks use sandbox.image alone.
	Off bool `mapstructure:"off"`
	// Egress lists the hosts environment setup steps may reach through the
	// logged proxy (e.g. an internal module proxy or package index).
	Egress []string `mapstructure:"egress"`
	// DefaultFile is an environment.yaml used for repositories without one.
	DefaultFile string `mapstructure:"default_file"`
	// Repos replace a repository's own environment file with the user's.
	Repos []EnvRepoConfig `mapstructure:"repos"`
	// SeedHostCaches mounts the host's Go module cache read-only into
	// sandboxes as a last-resort module source.
	SeedHostCaches bool `mapstructure:"seed_host_caches"`
	// Include are patterns of untracked files copied from the checkout
	// into each task's worktree (a repository's .agent/include only
	// proposes them).
	Include []string `mapstructure:"include"`
	// Bases are the images a repository's .agent/environment.yaml may
	// name as its base, besides sandbox.image and the images agent built.
	Bases []string `mapstructure:"bases"`
}

// EnvRepoConfig names the environment file of one checkout.
type EnvRepoConfig struct {
	Repo string `mapstructure:"repo"`
	File string `mapstructure:"file"`
}

func setDefaults(v *viper.Viper) {
	v.SetDefault("state_dir", defaultStateDir())
	v.SetDefault("sandbox.image", "agent/sandbox:latest")
	v.SetDefault("sandbox.memory", "4g")
	v.SetDefault("sandbox.cpus", 2.0)
	v.SetDefault("sandbox.pids", 512)
	v.SetDefault("sandbox.tmpfs", "1g")
	v.SetDefault("sandbox.disk", "10g")
	v.SetDefault("sandbox.min_free", "1g")
	v.SetDefault("sandbox.gpu_reserve", "1g")
	v.SetDefault("sandbox.toolbox", "")
	v.SetDefault("sandbox.isolation", "runc")
	v.SetDefault("sandbox.runtime", "")
	v.SetDefault("sandbox.seccomp", "strict")
	v.SetDefault("sandbox.shell", "")
	v.SetDefault("sandbox.egress", []string{})
	v.SetDefault("sandbox.spare_checkouts", 1)
	v.SetDefault("sandbox.pool", 2)
	v.SetDefault("llm.url", "")
	v.SetDefault("llm.api_key", "")
	v.SetDefault("llm.model", "")
	v.SetDefault("llm.served_model", "")
	v.SetDefault("llm.image", "agent/llama-server:cpu")
	v.SetDefault("llm.port", 8080)
	v.SetDefault("llm.ctx", 16384)
	v.SetDefault("llm.parallel", 2)
	v.SetDefault("llm.gpus", "auto")
	v.SetDefault("llm.start_timeout", 300*time.Second)
	v.SetDefault("llm.stall_timeout", 120*time.Second)
	v.SetDefault("llm.reply_timeout", 30*time.Minute)
	v.SetDefault("agent.max_iterations", 25)
	v.SetDefault("agent.tool_mode", "auto")
	v.SetDefault("agent.test", "")
	v.SetDefault("agent.test_timeout", 10*time.Minute)
	v.SetDefault("agent.sub_agents", true)
	v.SetDefault("agent.hooks.session_start", []string{})
	v.SetDefault("agent.hooks.pre_tool", []string{})
	v.SetDefault("agent.hooks.post_tool", []string{})
	v.SetDefault("images.mirror", "")
	v.SetDefault("env.off", false)
	v.SetDefault("env.egress", []string{})
	v.SetDefault("env.default_file", "")
	v.SetDefault("env.seed_host_caches", false)
	v.SetDefault("env.include", []string{})
	v.SetDefault("env.bases", []string{})
	// A list of {repo, file}: a key of its own (its items are not keys).
	v.SetDefault("env.repos", []map[string]any{})
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
	v *viper.Viper
	// projDir is the directory whose .agent/config.yaml applies, resolved
	// by the command ("": the working directory). Loading never resolves
	// it: no git, no process, only files are read.
	projDir  string
	cfg      *Config
	err      error
	warnings []string

	// Where values came from, for `agent config`: the files read and the
	// keys each one set (project: only the keys it may set).
	userFile, projectFile string
	userKeys, projKeys    map[string]bool
	flags                 map[string]*pflag.Flag
	// repoMCP are the MCP servers a repository's own config declared.
	repoMCP map[string]bool
}

func newConfigLoader() *configLoader {
	v := viper.New()
	setDefaults(v)
	v.SetEnvPrefix("AGENT")
	v.SetEnvKeyReplacer(strings.NewReplacer(".", "_"))
	v.AutomaticEnv()
	return &configLoader{v: v}
}

// bind makes a flag set the config key when the user gives it.
func (l *configLoader) bind(key string, fl *pflag.Flag) {
	if fl == nil {
		panic("config: binding a flag that does not exist: " + key)
	}
	if err := l.v.BindPFlag(key, fl); err != nil {
		panic(err)
	}
	if l.flags == nil {
		l.flags = map[string]*pflag.Flag{}
	}
	l.flags[key] = fl
}

// stateDir is the state directory as configured so far. A project config
// cannot set it, so it is final before the project directory is chosen.
func (l *configLoader) stateDir() string {
	d, err := filepath.Abs(l.v.GetString("state_dir"))
	if err != nil {
		return l.v.GetString("state_dir")
	}
	return d
}

func (l *configLoader) load() (*Config, error) {
	if l.cfg != nil || l.err != nil {
		return l.cfg, l.err
	}
	l.cfg, l.err = l.read()
	return l.cfg, l.err
}

// envVar is the environment variable that sets a key (sandbox.image ->
// AGENT_SANDBOX_IMAGE).
func envVar(key string) string {
	return "AGENT_" + strings.ToUpper(strings.ReplaceAll(key, ".", "_"))
}

// projectKeys are the only keys a repository's own .agent/config.yaml may
// set. The file comes with the code, and the code is not trusted: a cloned
// repository, or a change an agent made and the user merged, must not be
// able to point the model endpoint elsewhere (llm.url would send the code
// there), open egress, swap the sandbox image, runtime or toolbox, or move
// the state directory. Those belong to the user's own config, environment
// and flags. Hooks are allowed: they run inside the sandbox.
var projectKeys = []string{
	"agent.max_iterations",
	"agent.tool_mode",
	"agent.sub_agents",
	"agent.hooks.session_start",
	"agent.hooks.pre_tool",
	"agent.hooks.post_tool",
	"sandbox.memory",
	"sandbox.cpus",
	"sandbox.pids",
	"sandbox.tmpfs",
	"sandbox.disk",
	"sandbox.shell",
	"llm.model",
	"llm.served_model",
	"llm.ctx",
	"llm.parallel",
	"llm.gpus",
	"llm.start_timeout",
}

func (l *configLoader) read() (*Config, error) {
	l.userKeys, l.projKeys = map[string]bool{}, map[string]bool{}
	if f := userConfigFile(); f != "" {
		if _, err := os.Stat(f); err == nil {
			uv := viper.New()
			uv.SetConfigFile(f)
			if err := uv.ReadInConfig(); err != nil {
				return nil, fmt.Errorf("reading config %s: %w", f, err)
			}
			for _, key := range uv.AllKeys() {
				if err := checkKey(key); err != nil {
					return nil, fmt.Errorf("config %s: %w", f, err)
				}
				l.userKeys[key] = true
			}
			l.userFile = f
			l.v.SetConfigFile(f)
			if err := l.v.MergeInConfig(); err != nil {
				return nil, fmt.Errorf("reading config %s: %w", f, err)
			}
		}
	}
	d := l.projDir
	if d == "" {
		d, _ = os.Getwd()
	}
	if d != "" {
		if err := l.mergeProject(d); err != nil {
			return nil, err
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
	c.Warnings = l.warnings
	for name := range l.repoMCP {
		if srv, ok := c.MCP.Servers[name]; ok {
			srv.FromRepository = true
			c.MCP.Servers[name] = srv
		}
	}
	return &c, nil
}

// knownKeys are every configuration key (those with a default).
func knownKeys() []string {
	v := viper.New()
	setDefaults(v)
	keys := v.AllKeys()
	slices.Sort(keys)
	return keys
}

// checkKey rejects a key the configuration does not have, suggesting the
// closest one: a typo must not be silently ignored.
// mapKeys are configuration maps keyed by names the user chooses.
var mapKeys = []string{"mcp.servers", "agent.types"}

func checkKey(key string) error {
	known := knownKeys()
	if slices.Contains(known, key) {
		return nil
	}
	// Keys under a map whose entries the user names (mcp.servers.NAME...,
	// agent.types.NAME...) are valid whatever the name.
	for _, m := range mapKeys {
		if strings.HasPrefix(key, m+".") {
			return nil
		}
	}
	best, bestD := "", 4
	for _, k := range known {
		if d := editDistance(key, k); d < bestD {
			best, bestD = k, d
		}
	}
	if best == "" {
		// A cut-short key (agent.max_iter -> agent.max_iterations).
		for _, k := range known {
			if strings.HasPrefix(k, key) {
				best = k
				break
			}
		}
	}
	if best == "" {
		// Same last part under another section (memory -> sandbox.memory).
		last := key[strings.LastIndex(key, ".")+1:]
		for _, k := range known {
			if strings.HasSuffix(k, "."+last) || k == last {
				best = k
				break
			}
		}
	}
	if best != "" {
		return fmt.Errorf("unknown key %q: did you mean %q? (`agent config` lists every key)", key, best)
	}
	return fmt.Errorf("unknown key %q (`agent config` lists every key)", key)
}

// editDistance is the edit distance of a and b with a swap of two
// neighbouring characters counted as one edit (optimal string alignment):
// the commonest typo (pdis for pids) is then nearer than an unrelated key.
func editDistance(a, b string) int {
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}

// mergeProject merges the allowed keys of the project config file of dir
// and records a warning for every other key it sets, for every limit it
// would raise above the user's effective value (the user's stays), and
// for a .agent or config.yaml that is a symlink (nothing of it applies).
func (l *configLoader) mergeProject(dir string) error {
	file := filepath.Join(dir, ".agent", "config.yaml")
	data, found, err := readProjectConfig(dir)
	if err != nil {
		if !found {
			return fmt.Errorf("reading project config %s: %w", file, err)
		}
		l.warnings = append(l.warnings, "ignoring the repository's configuration: "+err.Error())
		return nil
	}
	if !found {
		return nil
	}
	pv := viper.New()
	pv.SetConfigType("yaml")
	if err := pv.ReadConfig(bytes.NewReader(data)); err != nil {
		return fmt.Errorf("reading project config %s: %w", file, err)
	}
	l.projectFile = file
	allowed := map[string]any{}
	for _, key := range pv.AllKeys() {
		// A repository may be written for another version of agent: an
		// unknown key there is a warning, not an error.
		if err := checkKey(key); err != nil {
			l.warnings = append(l.warnings, fmt.Sprintf("%s: ignoring %v", file, err))
			continue
		}
		if name, ok := projectMCPKey(key); ok {
			// A repository may declare MCP servers: they run in its own
			// sandbox, like its hooks; the review says which ones.
			if l.repoMCP == nil {
				l.repoMCP = map[string]bool{}
			}
			l.repoMCP[name] = true
			setNested(allowed, strings.Split(key, "."), pv.Get(key))
			continue
		}
		if !slices.Contains(projectKeys, key) {
			l.warnings = append(l.warnings, fmt.Sprintf("%s: ignoring %q: a repository's config may not set it (set it in your own %s or with %s)",
				file, key, userConfigFile(), envVar(key)))
			continue
		}
		if why := lowersLimit(key, pv.Get(key), l.v.Get(key)); why != "" {
			l.warnings = append(l.warnings, fmt.Sprintf("%s: ignoring %s: %s: %v stays (raise it in %s, %s or a flag)",
				file, key, why, l.v.Get(key), userConfigFile(), envVar(key)))
			continue
		}
		l.projKeys[key] = true
		setNested(allowed, strings.Split(key, "."), pv.Get(key))
	}
	if len(allowed) == 0 {
		return nil
	}
	if err := l.v.MergeConfigMap(allowed); err != nil {
		return fmt.Errorf("project config %s: %w", file, err)
	}
	return nil
}

// projectMCPKey reports whether key is part of an MCP server declaration
// (mcp.servers.NAME.command|args|env...) and returns the server's name.
func projectMCPKey(key string) (string, bool) {
	parts := strings.Split(key, ".")
	if len(parts) < 4 || parts[0] != "mcp" || parts[1] != "servers" {
		return "", false
	}
	switch parts[3] {
	case "command", "args", "env":
		return parts[2], true
	}
	return "", false
}

func setNested(m map[string]any, path []string, v any) {
	for _, p := range path[:len(path)-1] {
		next, ok := m[p].(map[string]any)
		if !ok {
			next = map[string]any{}
			m[p] = next
		}
		m = next
	}
	m[path[len(path)-1]] = v
}

// Origins of a configuration value, highest precedence first.
const (
	originFlag    = "flag"
	originEnv     = "env"
	originProject = "project"
	originUser    = "user"
	originDefault = "default"
)

// origin says where the effective value of key came from, and the file or
// variable behind it.
func (l *configLoader) origin(key string) (string, string) {
	if fl, ok := l.flags[key]; ok && fl.Changed {
		return originFlag, "--" + fl.Name
	}
	if v, ok := os.LookupEnv(envVar(key)); ok && v != "" {
		return originEnv, envVar(key)
	}
	if l.projKeys[key] {
		return originProject, l.projectFile
	}
	if l.userKeys[key] {
		return originUser, l.userFile
	}
	return originDefault, ""
}
