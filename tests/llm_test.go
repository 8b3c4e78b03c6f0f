package tests

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"

	"github.com/localagent/agent/agent/llm"
	"github.com/localagent/agent/compose"
	"github.com/localagent/agent/images"
	"github.com/localagent/agent/orchestrator/gguf/gguftest"
	"github.com/localagent/agent/orchestrator/llamaserver"
	"github.com/localagent/agent/sandbox"
)

// llmEnv is one test's private llama-server: a unique instance name, port
// and test label, so tests running at the same time never collide. It
// drives the built agent binary.
type llmEnv struct {
	t      *testing.T
	docker *client.Client
	agentE *AgentEnv
	id     string // instance name
	port   int
	model  string
	dir    string // working directory of the agent commands
}

func newLLMEnv(t *testing.T) *llmEnv {
	t.Helper()
	c := RequireEngine(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.ImageInspect(ctx, images.LlamaServer); err != nil {
		t.Fatalf("image %s is not present (%v): build it with `agent images build llama-server`", images.LlamaServer, err)
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	e := &llmEnv{t: t, docker: c, agentE: NewAgentEnv(t, c), id: "e2e-" + hex.EncodeToString(b), dir: t.TempDir()}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e.port = l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	e.model = filepath.Join(t.TempDir(), "tiny.gguf")
	if err := gguftest.WriteLlama(e.model, gguftest.Options{ContextLength: 8192, NeverEOS: true}); err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *llmEnv) containers(ctx context.Context) []container.Summary {
	list, err := LabelledContainers(ctx, e.docker, e.agentE.Label)
	if err != nil {
		e.t.Fatalf("listing containers: %v", err)
	}
	return list
}

// agent runs the built binary and returns its exit code, stdout and
// stderr.
func (e *llmEnv) agent(args ...string) (int, string, string) {
	e.t.Helper()
	return e.agentE.Run(e.dir, args...)
}

func (e *llmEnv) up(extra ...string) (int, string, string) {
	args := append([]string{"llm", "up", "--model", e.model, "--gpus", "none", "--ctx", "4096", "--parallel", "2",
		"--port", strconv.Itoa(e.port), "--instance", e.id, "--label", sandbox.LabelTest + "=" + e.agentE.Label, "--json"}, extra...)
	return e.agent(args...)
}

func (e *llmEnv) status() llamaserver.Status {
	e.t.Helper()
	code, out, errOut := e.agent("llm", "status", "--json", "--instance", e.id)
	var s llamaserver.Status
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		e.t.Fatalf("llm status --json: %v\n%s", err, out)
	}
	// 0 only when the server is ready: scripts wait on it.
	if (code == 0) != (s.State == llamaserver.StateReady) || (code != 0 && code != 1) {
		e.t.Fatalf("llm status: exit %d for state %s\n%s", code, s.State, errOut)
	}
	return s
}

func (e *llmEnv) client() *llm.HTTPClient {
	c, err := llm.NewHTTP(llm.Options{BaseURL: llamaserver.URL(e.port), MaxRetries: -1})
	if err != nil {
		e.t.Fatal(err)
	}
	return c
}

// The real llama-server, from up to down: health-gated start, slots and
// per-slot context as asked, a streamed completion through the project's
// client, reuse, a kill in the middle of a reply, recovery, and nothing
// left behind.
func TestLLMServerLifecycle(t *testing.T) {
	e := newLLMEnv(t)
	ctx := context.Background()

	start := time.Now()
	code, out, errOut := e.up()
	if code != 0 {
		t.Fatalf("llm up: exit %d\n%s", code, errOut)
	}
	t.Logf("llm up (cold): %s", time.Since(start).Round(time.Millisecond))
	var res llamaserver.Result
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("llm up --json: %v\n%s", err, out)
	}
	if res.State != llamaserver.StateReady || res.Reused {
		t.Fatalf("up result: %+v", res)
	}
	if !strings.Contains(errOut, "each of the 2 slots gets 2048 tokens") {
		t.Errorf("no small-context warning on stderr:\n%s", errOut)
	}

	s := e.status()
	if s.State != llamaserver.StateReady || s.TotalSlots != 2 || s.SlotCtx != 2048 || len(s.Slots) != 2 || s.Slots[1].NCtx != 2048 {
		t.Fatalf("status: %+v", s)
	}
	if s.URL != "http://127.0.0.1:"+strconv.Itoa(e.port) || s.Build == "" || s.BusySlots != 0 || s.Model != e.model {
		t.Errorf("status: %+v", s)
	}
	// What the agent sizes itself by: slots bound sub-agents, the
	// per-slot context is its budget.
	info, err := e.client().Info(ctx)
	if err != nil || info.Slots != 2 || info.ContextWindow != 2048 || !info.FromProps {
		t.Errorf("server info: %+v, %v", info, err)
	}

	// A streamed completion through the project's client.
	var deltas atomic.Int32
	resp, err := e.client().Stream(ctx, llm.Request{
		Messages:  []llm.Message{{Role: llm.RoleUser, Content: "Say hello."}},
		MaxTokens: 16,
	}, func(d llm.Delta) { deltas.Add(1) })
	if err != nil {
		t.Fatalf("stream: %v", err)
	}
	if deltas.Load() == 0 || resp.FinishReason != "length" || resp.Usage.CompletionTokens != 16 {
		t.Errorf("stream: %d deltas, response %+v", deltas.Load(), resp)
	}
	// The server's speed figures come with the stream; the same prompt
	// again is taken from its prompt cache.
	if tm := resp.Timings; tm == nil || tm.PredictedN != 16 || tm.PredictedMS <= 0 || tm.PromptN <= 0 {
		t.Errorf("stream timings: %+v", tm)
	}
	again, err := e.client().Stream(ctx, llm.Request{
		Messages:  []llm.Message{{Role: llm.RoleUser, Content: "Say hello."}},
		MaxTokens: 16,
	}, nil)
	if err != nil || again.Timings == nil || again.Timings.CacheN <= 0 {
		t.Errorf("repeated prompt: timings %+v, %v", again.Timings, err)
	} else {
		t.Logf("llama-server timings: first %+v; repeated prompt %+v", *resp.Timings, *again.Timings)
	}

	// The same settings again: the running server is kept.
	start = time.Now()
	code, out, errOut = e.up()
	if code != 0 || !strings.Contains(out, `"reused": true`) {
		t.Fatalf("second up: exit %d\n%s\n%s", code, out, errOut)
	}
	t.Logf("llm up (reuse): %s", time.Since(start).Round(time.Millisecond))

	// The server dies in the middle of a reply.
	started := make(chan struct{}, 1)
	done := make(chan error, 1)
	go func() {
		_, err := e.client().Stream(ctx, llm.Request{
			Messages:  []llm.Message{{Role: llm.RoleUser, Content: "Write a long story."}},
			MaxTokens: 1900,
		}, func(llm.Delta) {
			select {
			case started <- struct{}{}:
			default:
			}
		})
		done <- err
	}()
	select {
	case <-started:
	case <-time.After(60 * time.Second):
		t.Fatal("no delta within 60 s")
	}
	if busy := e.status(); busy.BusySlots != 1 {
		t.Errorf("status during a reply: %d busy slots", busy.BusySlots)
	}
	if err := e.docker.ContainerKill(ctx, s.ID, "KILL"); err != nil {
		t.Fatal(err)
	}
	select {
	case err = <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("the client did not notice the server's death within 60 s")
	}
	if err == nil || !llm.IsRetriable(err) {
		t.Fatalf("client error after the kill: %v (retriable: %v)", err, llm.IsRetriable(err))
	}
	t.Logf("client error after the kill: %v", err)
	if down := e.status(); down.State != llamaserver.StateStopped {
		t.Errorf("status after the kill: %+v", down)
	}
	code, out, errOut = e.agent("llm", "status", "--instance", e.id)
	if code != 1 || !strings.Contains(out, "stopped") || !strings.Contains(out, "agent llm up") {
		t.Errorf("human status after the kill: exit %d (want 1: not ready)\n%s%s", code, out, errOut)
	}

	// up recovers.
	code, out, errOut = e.up()
	if code != 0 || !strings.Contains(out, `"restarted": true`) {
		t.Fatalf("up after the kill: exit %d\n%s\n%s", code, out, errOut)
	}
	if _, err := e.client().Stream(ctx, llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Content: "again"}}, MaxTokens: 4}, nil); err != nil {
		t.Fatalf("stream after recovery: %v", err)
	}

	// Different settings replace the server.
	code, out, errOut = e.up("--parallel", "1")
	if code != 0 || !strings.Contains(out, `"replaced": true`) {
		t.Fatalf("up with other settings: exit %d\n%s\n%s", code, out, errOut)
	}
	if s := e.status(); s.TotalSlots != 1 || s.SlotCtx != 4096 {
		t.Errorf("status after replace: %+v", s)
	}

	code, out, errOut = e.agent("llm", "logs", "--instance", e.id, "--tail", "50")
	if code != 0 || !strings.Contains(out+errOut, "llama") {
		t.Errorf("llm logs: exit %d\n%s%s", code, out, errOut)
	}

	code, _, errOut = e.agent("llm", "down", "--instance", e.id)
	if code != 0 || !strings.Contains(errOut, "removed") {
		t.Fatalf("llm down: exit %d\n%s", code, errOut)
	}
	if left := e.containers(ctx); len(left) != 0 {
		t.Errorf("containers left after down: %v", left[0].Names)
	}
	if s := e.status(); s.State != llamaserver.StateAbsent {
		t.Errorf("status after down: %+v", s)
	}
	if c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(e.port), time.Second); err == nil {
		c.Close()
		t.Error("the port still answers after down")
	}
}

// Bad input through the command line: each a clear error with the right
// exit code, and no container left behind.
func TestLLMUpBadInput(t *testing.T) {
	e := newLLMEnv(t)
	dir := t.TempDir()
	text := filepath.Join(dir, "readme.gguf")
	if err := os.WriteFile(text, []byte("# not a model\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	busyPort := strconv.Itoa(busy.Addr().(*net.TCPAddr).Port)
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"missing model", []string{"--model", filepath.Join(dir, "nope.gguf")}, 1, "does not exist"},
		{"text file named .gguf", []string{"--model", text}, 1, "not a GGUF model file"},
		{"port in use", []string{"--port", busyPort}, 1, "port " + busyPort + " on 127.0.0.1 is already in use"},
		// An image not built here may have a GPU backend: the device
		// checks and the engine decide.
		{"unknown GPU id", []string{"--gpus", "5", "--image", "agent/busybox:latest"}, 1, "GPU 5 not found"},
		{"no GPU runtime", []string{"--gpus", "all", "--image", "agent/busybox:latest"}, 1, "no GPU runtime"},
		{"GPU asked of the CPU image", []string{"--gpus", "all"}, 1, "has only the CPU backend"},
		{"bad --gpus", []string{"--gpus", "fast"}, 2, "not a GPU index"},
		{"stray argument", []string{"oops"}, 2, "go after --"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, errOut := e.up(tc.args...)
			if code != tc.code || !strings.Contains(errOut, tc.want) {
				t.Errorf("exit %d (want %d), stderr:\n%s\nwant %q", code, tc.code, errOut, tc.want)
			}
			if strings.Contains(errOut, "goroutine ") {
				t.Errorf("stack trace in the error:\n%s", errOut)
			}
			if left := e.containers(context.Background()); len(left) != 0 {
				t.Errorf("container left behind: %v", left[0].Names)
			}
		})
	}
}

// The rendered compose file validates with the compose-spec loader and
// with docker-compose where it is installed.
func TestComposeRender(t *testing.T) {
	e := newLLMEnv(t)
	file := filepath.Join(t.TempDir(), "compose.yaml")
	for _, gpus := range []string{"none", "all", "0,1"} {
		code, _, errOut := e.agent("compose", "render", "-o", file, "--model", e.model, "--gpus", gpus, "--port", strconv.Itoa(e.port))
		if code != 0 {
			t.Fatalf("compose render --gpus %s: exit %d\n%s", gpus, code, errOut)
		}
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		p, err := compose.Validate(context.Background(), data)
		if err != nil {
			t.Fatalf("--gpus %s: %v\n%s", gpus, err, data)
		}
		svc := p.Services[compose.ServiceName]
		if svc.Ports[0].HostIP != "127.0.0.1" || !svc.Volumes[0].ReadOnly || svc.Volumes[0].Source != filepath.Dir(e.model) {
			t.Errorf("--gpus %s: service %+v", gpus, svc)
		}
		if (gpus != "none") != (svc.Deploy != nil && svc.Deploy.Resources.Reservations != nil) {
			t.Errorf("--gpus %s: deploy %+v", gpus, svc.Deploy)
		}
		if tool, err := exec.LookPath("docker-compose"); err == nil {
			if out, err := exec.Command(tool, "-f", file, "config", "-q").CombinedOutput(); err != nil {
				t.Errorf("--gpus %s: docker-compose config: %v\n%s", gpus, err, out)
			}
		}
	}
	// To stdout by default.
	code, out, _ := e.agent("compose", "render", "--model", e.model, "--gpus", "none")
	if code != 0 || !bytes.Contains([]byte(out), []byte("llama-server:")) {
		t.Errorf("render to stdout: exit %d\n%s", code, out)
	}
}

// `agent task` finds the server its state directory started, on the port
// `llm up --port N` published, while llm.port still says 8080; the task
// ran pinned to a slot and its record holds the server's cache figures.
func TestTaskFindsServerStartedOnAnotherPort(t *testing.T) {
	e := newLLMEnv(t)
	model := filepath.Join(t.TempDir(), "stops.gguf")
	if err := gguftest.WriteLlama(model, gguftest.Options{ContextLength: 16384}); err != nil {
		t.Fatal(err)
	}
	code, _, errOut := e.agent("llm", "up", "--model", model, "--gpus", "none", "--ctx", "16384", "--parallel", "1",
		"--port", strconv.Itoa(e.port), "--label", sandbox.LabelTest+"="+e.agentE.Label)
	if code != 0 {
		t.Fatalf("llm up: exit %d\n%s", code, errOut)
	}
	repo := NewSampleRepo(t)
	code, out, errOut := e.agentE.Run(repo, "task", "--approve", "discard", e.agentE.LabelFlag(), "Say hi")
	if code != 0 || strings.Contains(errOut, "no LLM server answers") || !strings.Contains(out, "discarded task") {
		t.Fatalf("agent task: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	rec := onlyTask(t, e.agentE.StateDir)
	if len(rec.Tokens.Turns) == 0 || rec.Tokens.Turns[0].Slot == nil || *rec.Tokens.Turns[0].Slot != 0 || rec.Tokens.Turns[0].Processed == 0 {
		t.Errorf("the task's token figures lack the server's per-turn cache figures: %+v", rec.Tokens)
	}
	if code, _, errOut := e.agent("llm", "down"); code != 0 || !strings.Contains(errOut, "removed agent-llm-") {
		t.Errorf("llm down: exit %d: %s", code, errOut)
	}
}
