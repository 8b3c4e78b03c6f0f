package sandboxtest_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/localagent/agent/sandbox"
	"github.com/localagent/agent/sandbox/sandboxtest"
	"github.com/localagent/agent/sandbox/toolbox"
)

// TestLocalBackendContract runs the real toolbox over a directory through
// the same Sandbox handle as Docker's, and keeps the backend's error
// classes: frozen is ErrNotRunning, removed is ErrNotFound.
func TestLocalBackendContract(t *testing.T) {
	ctx := context.Background()
	ws := t.TempDir()
	l := sandboxtest.NewLocal()
	var b sandbox.Backend = l
	sb, err := b.Create(ctx, sandbox.Spec{Workspace: ws, Task: "t1", StateID: "s1", Labels: map[string]string{sandbox.LabelManaged: "no"}})
	if err != nil {
		t.Fatal(err)
	}
	if sb.Labels[sandbox.LabelManaged] != sandbox.ManagedValue || sb.Labels[sandbox.LabelTask] != "t1" {
		t.Errorf("labels: %v", sb.Labels)
	}
	// Session and one-exec-per-call paths both reach the toolbox.
	r, err := sb.Tool(ctx, toolbox.ToolWriteFile, json.RawMessage(`{"path":"a.txt","content":"hello"}`))
	if err != nil || r.IsError {
		t.Fatalf("write_file: %+v %v", r, err)
	}
	if got, _ := os.ReadFile(filepath.Join(ws, "a.txt")); string(got) != "hello" {
		t.Errorf("file: %q", got)
	}
	sb.Close() // later calls use one exec each
	r, err = sb.Tool(ctx, toolbox.ToolReadFile, json.RawMessage(`{"path":"a.txt"}`))
	if err != nil || !strings.Contains(r.Output, "hello") {
		t.Fatalf("read_file over exec: %+v %v", r, err)
	}

	other, _ := b.Create(ctx, sandbox.Spec{Workspace: ws, Task: "t2", StateID: "s2"})
	for _, tc := range []struct {
		labels []string
		want   int
	}{{nil, 2}, {[]string{sandbox.LabelState + "=s1"}, 1}, {[]string{sandbox.LabelTask}, 2}, {[]string{"nope"}, 0}} {
		got, err := b.List(ctx, sandbox.ListOptions{Labels: tc.labels})
		if err != nil || len(got) != tc.want {
			t.Errorf("List %v: %d sandboxes, want %d (%v)", tc.labels, len(got), tc.want, err)
		}
	}

	if err := sb.Freeze(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Run(ctx, sandbox.ToolboxPath, "call"); !errors.Is(err, sandbox.ErrNotRunning) {
		t.Errorf("exec in a frozen sandbox: %v, want ErrNotRunning", err)
	}
	if err := sb.Thaw(ctx); err != nil {
		t.Fatal(err)
	}
	if err := sb.Remove(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Tool(ctx, toolbox.ToolReadFile, json.RawMessage(`{"path":"a.txt"}`)); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("tool in a removed sandbox: %v, want ErrNotFound", err)
	}
	if _, err := b.Get(ctx, sb.ID); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("Get of a removed sandbox: %v", err)
	}
	if got, err := b.Get(ctx, other.ID[:62]); err != nil || got.ID != other.ID {
		t.Errorf("Get by prefix: %v %v", got, err)
	}
	l.Missing = map[string]bool{"x:1": true}
	var missing *sandbox.ImageMissingError
	if _, err := b.Create(ctx, sandbox.Spec{Workspace: ws, Image: "x:1"}); !errors.As(err, &missing) {
		t.Errorf("missing image: %v", err)
	}
}
