package sandbox_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/localagent/agent/sandbox"
	"github.com/localagent/agent/sandbox/sandboxtest"
	"github.com/localagent/agent/sandbox/toolbox"
)

func benchSandbox(b *testing.B) *sandbox.Sandbox {
	e := sandboxtest.RequireDocker(b)
	ws := b.TempDir()
	if err := os.WriteFile(filepath.Join(ws, "small.txt"), []byte("one\ntwo\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	return sandboxtest.New(b, e, sandbox.Spec{Workspace: ws})
}

// BenchmarkReadFile is one read_file over the session.
func BenchmarkReadFile(b *testing.B) {
	sb := benchSandbox(b)
	ctx := context.Background()
	args := []byte(`{"path":"small.txt"}`)
	if _, err := sb.Tool(ctx, toolbox.ToolReadFile, args); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if r, err := sb.Tool(ctx, toolbox.ToolReadFile, args); err != nil || r.IsError {
			b.Fatal(r, err)
		}
	}
}

// BenchmarkExec is one Engine-API exec of `true` (create, attach, inspect),
// the per-call cost the session avoids.
func BenchmarkExec(b *testing.B) {
	sb := benchSandbox(b)
	ctx := context.Background()
	for i := 0; i < b.N; i++ {
		if res, err := sb.Run(ctx, "true"); err != nil || res.ExitCode != 0 {
			b.Fatal(res, err)
		}
	}
}
