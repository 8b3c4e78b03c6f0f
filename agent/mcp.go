package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/localagent/agent/agent/event"
	"github.com/localagent/agent/agent/llm"
)

// MCPServer is an MCP server the agent may use. The orchestrator starts it
// inside the task's sandbox and hands the agent its standard streams: the
// agent speaks MCP (JSON-RPC over stdio) through them and never starts a
// process itself.
type MCPServer struct {
	Name string
	// Open starts the server (or starts it again) and returns its output
	// and input.
	Open func(ctx context.Context) (io.ReadCloser, io.WriteCloser, error)
}

// mcpPrefix starts the name of every MCP tool: mcp__<server>__<tool>.
const mcpPrefix = "mcp__"

// maxMCPMessage bounds one message from an MCP server (one line of its
// output): the server runs in the sandbox, and the JSON decoder would
// otherwise hold a message of any size in memory.
const maxMCPMessage = 16 << 20

// errMCPMessageTooLarge ends a session whose server sent a longer line.
var errMCPMessageTooLarge = fmt.Errorf("MCP server message longer than %d bytes", maxMCPMessage)

// lineLimitReader fails once a line (a newline-delimited message) grows
// past max bytes.
type lineLimitReader struct {
	r   io.ReadCloser
	max int
	cur int
}

func (l *lineLimitReader) Read(p []byte) (int, error) {
	n, err := l.r.Read(p)
	for _, c := range p[:n] {
		if c == '\n' {
			l.cur = 0
		} else if l.cur++; l.cur > l.max {
			return 0, errMCPMessageTooLarge
		}
	}
	return n, err
}

func (l *lineLimitReader) Close() error { return l.r.Close() }

// mcpConnectTimeout bounds starting a server and listing its tools.
const mcpConnectTimeout = 30 * time.Second

type mcpServerConn struct {
	srv      MCPServer
	sess     *mcp.ClientSession
	restarts int
}

type mcpTool struct {
	conn     *mcpServerConn
	tool     string // the server's own name for it
	def      llm.Tool
	resource bool // the read_resource tool of a server with resources
}

// mcpResourceTool is the tool name under which a server's resources are
// read: mcp__<server>__read_resource.
const mcpResourceTool = "read_resource"

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9_-]`)

// mcpToolName is the name the model sees for a server's tool.
func mcpToolName(server, tool string) string {
	return mcpPrefix + unsafeName.ReplaceAllString(server, "_") + "__" + unsafeName.ReplaceAllString(tool, "_")
}

func (c *mcpServerConn) connect(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, mcpConnectTimeout)
	defer cancel()
	out, in, err := c.srv.Open(ctx)
	if err != nil {
		return err
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil)
	sess, err := client.Connect(ctx, &mcp.IOTransport{Reader: &lineLimitReader{r: out, max: maxMCPMessage}, Writer: in}, nil)
	if err != nil {
		_ = in.Close()
		return fmt.Errorf("MCP server %s: %w", c.srv.Name, err)
	}
	c.sess = sess
	return nil
}

// ConnectMCP starts the MCP servers and offers their tools (those the
// agent's AllowedTools allow) as mcp__<server>__<tool>. Call it before Run.
// A server that fails to start is reported as a notice and left out.
func (a *Agent) ConnectMCP(ctx context.Context, servers []MCPServer) {
	for _, srv := range servers {
		c := &mcpServerConn{srv: srv}
		if err := c.connect(ctx); err != nil {
			a.emit(event.Event{Kind: event.Notice, Text: fmt.Sprintf("MCP server %s is not available: %v", srv.Name, err)})
			continue
		}
		lctx, cancel := context.WithTimeout(ctx, mcpConnectTimeout)
		res, err := c.sess.ListTools(lctx, nil)
		cancel()
		if err != nil {
			a.emit(event.Event{Kind: event.Notice, Text: fmt.Sprintf("MCP server %s: listing its tools: %v", srv.Name, err)})
			_ = c.sess.Close()
			continue
		}
		for _, t := range res.Tools {
			schema, err := json.Marshal(t.InputSchema)
			if err != nil || t.InputSchema == nil {
				schema = []byte(`{"type":"object"}`)
			}
			name := mcpToolName(srv.Name, t.Name)
			if a.runner.mcp == nil {
				a.runner.mcp = map[string]*mcpTool{}
			}
			a.runner.mcp[name] = &mcpTool{conn: c, tool: t.Name, def: llm.Tool{Type: "function", Function: llm.FunctionDef{
				Name: name, Description: fmt.Sprintf("(MCP server %s) %s", srv.Name, t.Description), Parameters: schema,
			}}}
		}
		a.addResourceTool(ctx, c)
		a.mcpConns = append(a.mcpConns, c)
	}
	a.refreshTools()
}

// addResourceTool offers mcp__<server>__read_resource when the server has
// resources, listing them (up to 50) in the tool's description.
func (a *Agent) addResourceTool(ctx context.Context, c *mcpServerConn) {
	ir := c.sess.InitializeResult()
	if ir == nil || ir.Capabilities == nil || ir.Capabilities.Resources == nil {
		return
	}
	lctx, cancel := context.WithTimeout(ctx, mcpConnectTimeout)
	defer cancel()
	res, err := c.sess.ListResources(lctx, nil)
	if err != nil || len(res.Resources) == 0 {
		return
	}
	var b strings.Builder
	fmt.Fprintf(&b, "(MCP server %s) Read one of the server's resources by URI. Resources:", c.srv.Name)
	for i, r := range res.Resources {
		if i == 50 {
			b.WriteString(" ...")
			break
		}
		fmt.Fprintf(&b, " %s (%s);", r.URI, r.Name)
	}
	name := mcpToolName(c.srv.Name, mcpResourceTool)
	if a.runner.mcp == nil {
		a.runner.mcp = map[string]*mcpTool{}
	}
	if _, taken := a.runner.mcp[name]; taken {
		return // the server has a tool of that name: it wins
	}
	a.runner.mcp[name] = &mcpTool{conn: c, resource: true, def: llm.Tool{Type: "function", Function: llm.FunctionDef{
		Name: name, Description: b.String(),
		Parameters: json.RawMessage(`{"type":"object","properties":{"uri":{"type":"string","description":"The resource's URI."}},"required":["uri"]}`),
	}}}
}

// readMCPResource reads a resource's text.
func (r *toolRunner) readMCPResource(ctx context.Context, t *mcpTool, args map[string]any) (ToolResult, error) {
	uri, _ := args["uri"].(string)
	if uri == "" {
		return errResult("%s: uri is required", t.def.Function.Name), nil
	}
	res, err := t.conn.sess.ReadResource(ctx, &mcp.ReadResourceParams{URI: uri})
	if err != nil {
		if ctx.Err() != nil {
			return ToolResult{}, ctx.Err()
		}
		return errResult("%s: %v", t.def.Function.Name, err), nil
	}
	var b strings.Builder
	for _, c := range res.Contents {
		if c.Text != "" {
			b.WriteString(c.Text)
			if !strings.HasSuffix(c.Text, "\n") {
				b.WriteByte('\n')
			}
		} else if len(c.Blob) > 0 {
			fmt.Fprintf(&b, "[%s: %d bytes of %s, not text]\n", c.URI, len(c.Blob), c.MIMEType)
		}
	}
	if b.Len() == 0 {
		return ToolResult{Output: "(empty resource)"}, nil
	}
	return ToolResult{Output: b.String()}, nil
}

// closeMCP ends the MCP sessions.
func (a *Agent) closeMCP() {
	for _, c := range a.mcpConns {
		if c.sess != nil {
			_ = c.sess.Close()
		}
	}
	a.mcpConns = nil
}

// mcpNames lists the offered MCP tools, sorted.
func (r *toolRunner) mcpNames() []string {
	var names []string
	for n := range r.mcp {
		if allowed(r.allow, n) {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	return names
}

// callMCP runs an MCP tool. A server whose session ended is started again
// once; after that its tools fail as results.
func (r *toolRunner) callMCP(ctx context.Context, t *mcpTool, args []byte) (ToolResult, error) {
	var a map[string]any
	if err := json.Unmarshal(args, &a); err != nil {
		return errResult("%s: arguments must be a JSON object: %v", t.def.Function.Name, err), nil
	}
	if t.resource {
		return r.readMCPResource(ctx, t, a)
	}
	start := time.Now()
	res, err := t.conn.sess.CallTool(ctx, &mcp.CallToolParams{Name: t.tool, Arguments: a})
	if err != nil && ctx.Err() == nil && t.conn.restarts == 0 {
		t.conn.restarts++
		_ = t.conn.sess.Close()
		if cerr := t.conn.connect(ctx); cerr != nil {
			return errResult("%s: the MCP server %s died and could not be restarted: %v", t.def.Function.Name, t.conn.srv.Name, cerr), nil
		}
		res, err = t.conn.sess.CallTool(ctx, &mcp.CallToolParams{Name: t.tool, Arguments: a})
	}
	if err != nil {
		if ctx.Err() != nil {
			return ToolResult{}, ctx.Err()
		}
		return errResult("%s: %v", t.def.Function.Name, err), nil
	}
	var b strings.Builder
	for _, c := range res.Content {
		switch c := c.(type) {
		case *mcp.TextContent:
			b.WriteString(c.Text)
			if !strings.HasSuffix(c.Text, "\n") {
				b.WriteByte('\n')
			}
		default:
			raw, _ := json.Marshal(c)
			b.Write(raw)
			b.WriteByte('\n')
		}
	}
	if b.Len() == 0 && res.StructuredContent != nil {
		raw, _ := json.Marshal(res.StructuredContent)
		b.Write(raw)
	}
	out := b.String()
	if out == "" {
		out = "(no output)"
	}
	return ToolResult{Output: out, IsError: res.IsError, Duration: time.Since(start)}, nil
}
