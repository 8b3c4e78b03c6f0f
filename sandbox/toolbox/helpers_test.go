package toolbox

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func newTestServer(t *testing.T) *Server {
	t.Helper()
	return &Server{Root: t.TempDir()}
}

func call(t *testing.T, s *Server, tool string, args any) Response {
	t.Helper()
	return callCtx(context.Background(), t, s, tool, args)
}

func callCtx(ctx context.Context, t *testing.T, s *Server, tool string, args any) Response {
	t.Helper()
	var raw json.RawMessage
	switch a := args.(type) {
	case string:
		raw = json.RawMessage(a)
	case nil:
	default:
		b, err := json.Marshal(a)
		if err != nil {
			t.Fatal(err)
		}
		raw = b
	}
	return s.Handle(ctx, Request{ID: 7, Tool: tool, Args: raw})
}

func writeTestFile(t testing.TB, root, rel, content string) string {
	t.Helper()
	p := filepath.Join(root, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func readTestFile(t *testing.T, root, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// check asserts the error flag and that the output contains every want.
func check(t *testing.T, r Response, isError bool, wants ...string) {
	t.Helper()
	if r.IsError != isError {
		t.Errorf("IsError = %v, want %v; output:\n%s", r.IsError, isError, r.Output)
	}
	for _, w := range wants {
		if !strings.Contains(r.Output, w) {
			t.Errorf("output does not contain %q:\n%s", w, r.Output)
		}
	}
}

func numbered(lines ...string) string {
	var b strings.Builder
	for i, l := range lines {
		fmt.Fprintf(&b, "%6d\t%s\n", i+1, l)
	}
	return b.String()
}
