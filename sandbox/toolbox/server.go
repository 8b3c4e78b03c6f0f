package toolbox

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// Limits bound what one tool call may return or take. The zero value of a
// field means "use the default" (see DefaultLimits).
type Limits struct {
	// ReadLines is read_file's default line count when limit is not given.
	ReadLines int
	// LineChars cuts longer lines in read_file output.
	LineChars int
	// ReadBytes caps read_file's output; the reader is told the offset to
	// continue from.
	ReadBytes int
	// ListEntries caps list_dir.
	ListEntries int
	// GlobResults caps glob.
	GlobResults int
	// GrepMatches caps grep's matching lines.
	GrepMatches int
	// GrepLineChars cuts long matching lines in grep output.
	GrepLineChars int
	// OutputBytes caps the bash tool's combined output; the head and the
	// tail are kept.
	OutputBytes int
	// DefaultTimeout is the bash tool's timeout when none is given.
	DefaultTimeout time.Duration
	// MaxTimeout is the longest timeout a caller may ask for.
	MaxTimeout time.Duration
}

// DefaultLimits are sized for a model's context window: large enough to be
// useful, small enough that one call cannot flood the conversation.
func DefaultLimits() Limits {
	return Limits{
		ReadLines:      2000,
		LineChars:      2000,
		ReadBytes:      256 << 10,
		ListEntries:    1000,
		GlobResults:    1000,
		GrepMatches:    500,
		GrepLineChars:  500,
		OutputBytes:    256 << 10,
		DefaultTimeout: 120 * time.Second,
		MaxTimeout:     600 * time.Second,
	}
}

func (l Limits) withDefaults() Limits {
	d := DefaultLimits()
	set := func(v *int, def int) {
		if *v <= 0 {
			*v = def
		}
	}
	set(&l.ReadLines, d.ReadLines)
	set(&l.LineChars, d.LineChars)
	set(&l.ReadBytes, d.ReadBytes)
	set(&l.ListEntries, d.ListEntries)
	set(&l.GlobResults, d.GlobResults)
	set(&l.GrepMatches, d.GrepMatches)
	set(&l.GrepLineChars, d.GrepLineChars)
	set(&l.OutputBytes, d.OutputBytes)
	if l.DefaultTimeout <= 0 {
		l.DefaultTimeout = d.DefaultTimeout
	}
	if l.MaxTimeout <= 0 {
		l.MaxTimeout = d.MaxTimeout
	}
	return l
}

// Server performs tool calls against one directory tree. It is safe for
// concurrent use; the caller orders calls that write.
type Server struct {
	// Root is the workspace directory; empty means WorkspaceRoot.
	Root string
	// Limits bound outputs and timeouts; zero fields take defaults.
	Limits Limits
	// Shell runs the bash tool's command as Shell -c COMMAND; empty means
	// /bin/bash when it exists (models write bash), else /bin/sh.
	Shell string
	// CgroupDir is where the container's cgroup filesystem is mounted, read
	// to tell an out-of-memory kill from any other SIGKILL; empty means
	// /sys/fs/cgroup.
	CgroupDir string
	// KillOrphans makes the process a child subreaper, so that processes a
	// command detached from its process group (setsid, a daemon's double
	// fork) are re-parented to it instead of to the container's init, and
	// kills them whenever no command is running: nothing a call started
	// outlives it. Set it only in a process whose children are all started
	// by this Server (the agent-toolbox binary): it kills and reaps any
	// other child too.
	KillOrphans bool
	// History is the task's read-only history repository (git tools);
	// empty means HistoryPath.
	History string
	// WebProxy is the proxy web_fetch uses; empty means the sandbox's
	// proxy environment (none: no network).
	WebProxy string

	procMu     sync.Mutex
	shells     map[int]struct{} // process ids of the running commands' shells
	background map[int]struct{} // process groups of background processes
	bg         processTable
}

func (s *Server) root() string {
	if s.Root == "" {
		return WorkspaceRoot
	}
	return filepath.Clean(s.Root)
}

func (s *Server) limits() Limits { return s.Limits.withDefaults() }

// toolNames lists the workspace tools in the order they are shown to a
// caller that asked for an unknown one.
var toolNames = []string{
	ToolReadFile, ToolWriteFile, ToolEditFile, ToolMultiEdit,
	ToolListDir, ToolGlob, ToolGrep, ToolBash,
	ToolProcessStart, ToolProcessOutput, ToolProcessStop,
	ToolGitDiff, ToolGitLog, ToolGitShow, ToolGitBlame, ToolWebFetch,
}

// Handle runs one request and returns its response; it never fails; a bad
// request is a Response with IsError set. OpCancel is only meaningful in a
// session (see Serve) and is answered with an error here.
func (s *Server) Handle(ctx context.Context, req Request) (resp Response) {
	start := time.Now()
	defer func() {
		// A bug in one tool must not end a session that other calls share:
		// it becomes that call's error.
		if v := recover(); v != nil {
			resp = errorf("internal error in the toolbox's %s tool: %v", req.Tool, v)
		}
		resp.ID = req.ID
		resp.DurationMS = time.Since(start).Milliseconds()
	}()
	return s.dispatch(ctx, req)
}

func (s *Server) dispatch(ctx context.Context, req Request) Response {
	req.Args = unquoteArgs(req.Args)
	switch req.Tool {
	case OpPing:
		return Response{Output: "pong"}
	case OpCancel:
		return errorf("cancel is only available in a serve session")
	case ToolReadFile:
		return s.readFile(ctx, req.Args)
	case ToolWriteFile:
		return s.writeFile(ctx, req.Args)
	case ToolEditFile:
		return s.editFile(ctx, req.Args)
	case ToolMultiEdit:
		return s.multiEdit(ctx, req.Args)
	case ToolListDir:
		return s.listDir(ctx, req.Args)
	case ToolGlob:
		return s.glob(ctx, req.Args)
	case ToolGrep:
		return s.grep(ctx, req.Args)
	case ToolBash:
		return s.bash(ctx, req.Args)
	case ToolProcessStart:
		return s.processStart(ctx, req.Args)
	case ToolProcessOutput:
		return s.processOutput(req.Args)
	case ToolProcessStop:
		return s.processStop(req.Args)
	case ToolGitDiff:
		return s.gitDiff(ctx, req.Args)
	case ToolGitLog:
		return s.gitLog(ctx, req.Args)
	case ToolGitShow:
		return s.gitShow(ctx, req.Args)
	case ToolGitBlame:
		return s.gitBlame(ctx, req.Args)
	case ToolWebFetch:
		return s.webFetch(ctx, req.Args)
	}
	if req.Tool == "" {
		return errorf("request has no tool name; known tools: %s", strings.Join(toolNames, ", "))
	}
	return errorf("unknown tool %q; known tools: %s", req.Tool, strings.Join(toolNames, ", "))
}

// unquoteArgs accepts arguments sent as a JSON string holding an object
// ("{\"path\":\"a\"}"), which weak models often produce; anything else is
// returned as it is.
func unquoteArgs(raw json.RawMessage) json.RawMessage {
	t := bytes.TrimSpace(raw)
	if len(t) == 0 || t[0] != '"' {
		return raw
	}
	var inner string
	if json.Unmarshal(t, &inner) != nil {
		return raw
	}
	if in := bytes.TrimSpace([]byte(inner)); len(in) > 0 && in[0] == '{' && json.Valid(in) {
		return in
	}
	return raw
}

// errorf builds a failed tool result: a message for the model.
func errorf(format string, a ...any) Response {
	return Response{Output: fmt.Sprintf(format, a...), IsError: true}
}

// decodeArgs unmarshals a tool's arguments. Unknown fields are ignored on
// purpose: local models often add fields (a "description" for bash), and
// refusing those would only make them fail for nothing. Wrong types and
// malformed JSON are refused with the tool's name so the model can retry.
func decodeArgs(tool string, raw json.RawMessage, v any) *Response {
	if len(strings.TrimSpace(string(raw))) == 0 {
		raw = json.RawMessage("{}")
	}
	if err := json.Unmarshal(raw, v); err != nil {
		r := errorf("invalid arguments for %s: %s", tool, describeJSONError(err))
		return &r
	}
	return nil
}

func describeJSONError(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		if te.Field == "" {
			return fmt.Sprintf("arguments must be a JSON object, not a JSON %s", te.Value)
		}
		return fmt.Sprintf("field %q must be %s, not a JSON %s", te.Field, jsonKind(te.Type.Kind().String()), te.Value)
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Sprintf("not valid JSON (%v at byte %d)", se, se.Offset)
	}
	return strings.TrimPrefix(err.Error(), "json: ")
}

func jsonKind(goKind string) string {
	switch goKind {
	case "string":
		return "a string"
	case "bool":
		return "a boolean"
	case "int", "int64", "float64", "uint64":
		return "a number"
	case "slice":
		return "an array"
	case "struct", "map":
		return "an object"
	}
	return goKind
}

// resolve turns a tool path into an absolute path inside the root. Paths
// are checked lexically, which is the point: the container's kernel then
// follows symlinks in the container's own mount namespace, so a link to a
// host path reaches the container's file of that name, never the host's.
// A path that names something outside the workspace by itself ("../x",
// "/etc/passwd") is refused so that the model learns where it may work.
func (s *Server) resolve(p string) (string, error) {
	root := s.root()
	if strings.ContainsRune(p, 0) {
		return "", fmt.Errorf("path %q contains a NUL byte", p)
	}
	var abs string
	switch {
	case p == "":
		abs = root
	case filepath.IsAbs(p):
		abs = filepath.Clean(p)
	default:
		abs = filepath.Join(root, p)
	}
	rel, err := filepath.Rel(root, abs)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return "", fmt.Errorf("path %s is outside the workspace %s; use a path relative to %s", p, root, root)
	}
	return abs, nil
}

// display is how a path is shown to the model: relative to the root, which
// is what the model should pass back.
func (s *Server) display(abs string) string {
	rel, err := filepath.Rel(s.root(), abs)
	if err != nil {
		return abs
	}
	return filepath.ToSlash(rel)
}
