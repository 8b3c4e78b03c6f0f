package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"

	"github.com/localagent/agent/images"
	"github.com/localagent/agent/orchestrator/gguf/gguftest"
	"github.com/localagent/agent/orchestrator/llamaserver"
	"github.com/localagent/agent/policy"
)

// After `llm up --port N` (llm.port still says 8080), a task finds the
// server from its container; `llm status` and `llm down` address the
// server of this state directory.
func TestTaskFindsServerStartedOnAnotherPort(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: needs the Docker engine and agent/llama-server:cpu")
	}
	dir := llmIsolate(t)
	c, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.ImageInspect(context.Background(), images.LlamaServer); err != nil {
		t.Fatalf("%s is not present: `agent images build llama-server`", images.LlamaServer)
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	id := "cli-llm-" + hex.EncodeToString(b)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		list, _ := c.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", policy.LabelTest+"="+id))})
		for _, s := range list {
			_ = c.ContainerRemove(ctx, s.ID, container.RemoveOptions{Force: true})
		}
		_ = c.Close()
	})
	model := filepath.Join(dir, "tiny.gguf")
	if err := gguftest.WriteLlama(model, gguftest.Options{}); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()

	ios, _, out, errOut := TestStreams()
	if code := Main([]string{"llm", "up", "--model", model, "--gpus", "none", "--ctx", "4096", "--port", strconv.Itoa(port), "--label", policy.LabelTest + "=" + id}, ios); code != 0 {
		t.Fatalf("llm up: exit %d\n%s%s", code, out, errOut)
	}
	if !strings.Contains(out.String(), "device cpu image, CPU") {
		t.Errorf("llm up output lacks the device line:\n%s", out)
	}

	f := NewFactory(ios)
	cfg, err := f.Config()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.LLM.Port == port {
		t.Fatalf("the test needs llm.port to differ from %d", port)
	}
	got, err := managedLLMAddress(f)(context.Background())
	if err != nil || got != llamaserver.URL(port) {
		t.Fatalf("task's address of the managed server: %q, %v; want %s", got, err, llamaserver.URL(port))
	}
	owner := llamaserver.OwnerOf(cfg.StateDir)

	ios, _, out, errOut = TestStreams()
	if code := Main([]string{"llm", "status"}, ios); code != 0 ||
		!strings.Contains(out.String(), llamaserver.URL(port)) || !strings.Contains(out.String(), "agent-llm-"+owner.ID) ||
		!strings.Contains(out.String(), "backend") {
		t.Errorf("llm status: exit %d\n%s%s", code, out, errOut)
	}
	ios, _, _, errOut = TestStreams()
	if code := Main([]string{"llm", "down"}, ios); code != 0 || !strings.Contains(errOut.String(), "removed agent-llm-"+owner.ID) {
		t.Errorf("llm down: exit %d: %s", code, errOut)
	}
	if _, err := managedLLMAddress(f)(context.Background()); err == nil {
		t.Error("an address for a removed server")
	}
}

func TestLLMUpForceAndInstanceFlags(t *testing.T) {
	llmIsolate(t)
	o, err := runUp(t, "--model", "m.gguf", "--force", "--instance", "coder")
	if err != nil || !o.Server.Force || o.Server.Instance != "coder" {
		t.Fatalf("flags: %+v, %v", o, err)
	}
	o, err = runUp(t, "--model", "m.gguf")
	if err != nil || o.Server.Force {
		t.Fatalf("--force is on by default: %+v, %v", o, err)
	}
	cmd := NewCmdLLMUp(NewFactory(nil), nil)
	if f := cmd.Flags().Lookup("instance"); f == nil || f.Hidden {
		t.Error("--instance is not a documented flag")
	}
}
