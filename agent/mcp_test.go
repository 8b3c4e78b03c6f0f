package agent

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// dyingMCP is an MCP server run in-process over pipes, standing in for a
// server in the sandbox: each Open starts it afresh, kill ends the running
// one the way a crashed process does (its streams close).
type dyingMCP struct {
	mu       sync.Mutex
	opens    int
	failOpen bool // later Opens fail, as when the sandbox cannot start it again
	sess     *mcp.ServerSession
}

func (d *dyingMCP) open(ctx context.Context) (io.ReadCloser, io.WriteCloser, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.failOpen && d.opens > 0 {
		return nil, nil, fmt.Errorf("exec: the process could not start")
	}
	d.opens++
	n := d.opens
	srv := mcp.NewServer(&mcp.Implementation{Name: "dying", Version: "1"}, nil)
	mcp.AddTool(srv, &mcp.Tool{Name: "ping", Description: "answers pong"},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("pong from start %d", n)}}}, nil, nil
		})
	toClientR, toClientW := io.Pipe()
	toServerR, toServerW := io.Pipe()
	ss, err := srv.Connect(context.Background(), &mcp.IOTransport{Reader: toServerR, Writer: toClientW}, nil)
	if err != nil {
		return nil, nil, err
	}
	d.sess = ss
	return toClientR, toServerW, nil
}

func (d *dyingMCP) kill() {
	d.mu.Lock()
	defer d.mu.Unlock()
	_ = d.sess.Close()
}

func (d *dyingMCP) starts() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.opens
}

// A server that dies is started again once and the call goes through; when
// it dies again its tools fail as tool results (not as errors that would
// end the run), and it is not started a third time.
func TestMCPServerDiesRestartedOnceThenFailsAsResult(t *testing.T) {
	ctx := t.Context()
	d := &dyingMCP{}
	a, err := New(Options{Client: &fakeClient{}, Workspace: newMemWorkspace(nil)})
	if err != nil {
		t.Fatal(err)
	}
	a.ConnectMCP(ctx, []MCPServer{{Name: "dying", Open: d.open}})
	t.Cleanup(a.closeMCP)
	call := func() ToolResult {
		t.Helper()
		res, err := a.runner.run(ctx, "mcp__dying__ping", []byte(`{}`))
		if err != nil {
			t.Fatalf("an MCP failure ended the run: %v", err)
		}
		return res
	}
	if res := call(); res.IsError || !strings.Contains(res.Output, "pong from start 1") || d.starts() != 1 {
		t.Fatalf("live server: %+v, starts %d", res, d.starts())
	}
	d.kill()
	if res := call(); res.IsError || !strings.Contains(res.Output, "pong from start 2") || d.starts() != 2 {
		t.Fatalf("after the first death, want the call answered by a restarted server: %+v, starts %d", res, d.starts())
	}
	d.kill()
	res := call()
	if !res.IsError || strings.Contains(res.Output, "pong") {
		t.Fatalf("after the second death, want a failed tool result: %+v", res)
	}
	if d.starts() != 2 {
		t.Fatalf("the server was started %d times, want 2 (one restart only)", d.starts())
	}
	if res := call(); !res.IsError || d.starts() != 2 {
		t.Fatalf("later calls: %+v, starts %d", res, d.starts())
	}
}

// The restart itself failing is reported as the tool's result too.
func TestMCPServerRestartFailsAsResult(t *testing.T) {
	ctx := t.Context()
	d := &dyingMCP{failOpen: true}
	a, err := New(Options{Client: &fakeClient{}, Workspace: newMemWorkspace(nil)})
	if err != nil {
		t.Fatal(err)
	}
	a.ConnectMCP(ctx, []MCPServer{{Name: "dying", Open: d.open}})
	t.Cleanup(a.closeMCP)
	d.kill()
	res, err := a.runner.run(ctx, "mcp__dying__ping", []byte(`{}`))
	if err != nil || !res.IsError || !strings.Contains(res.Output, "could not be restarted") {
		t.Fatalf("want a failed tool result naming the failed restart: %+v, %v", res, err)
	}
}

func TestLineLimitReader(t *testing.T) {
	ok := io.NopCloser(strings.NewReader(strings.Repeat("a", 10) + "\n" + strings.Repeat("b", 10) + "\n"))
	if b, err := io.ReadAll(&lineLimitReader{r: ok, max: 10}); err != nil || len(b) != 22 {
		t.Fatalf("lines at the limit: %d bytes, %v", len(b), err)
	}
	long := io.NopCloser(strings.NewReader(strings.Repeat("a", 10) + "\n" + strings.Repeat("b", 11) + "\n"))
	if _, err := io.ReadAll(&lineLimitReader{r: long, max: 10}); err != errMCPMessageTooLarge {
		t.Fatalf("a line past the limit: %v", err)
	}
}
