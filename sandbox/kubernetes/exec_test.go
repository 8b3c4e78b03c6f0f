package kubernetes

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/streaming/pkg/httpstream/wsstream"

	"github.com/localagent/agent/sandbox"
)

// execServer answers the pods/exec subresource the way a kubelet does
// behind the API server (the v5 WebSocket channel protocol, through the
// same wsstream package), running each command as a host process in root:
// what reaches it, and what comes back, is what a cluster would see. The
// sandbox's toolbox path runs the real agent-toolbox, built for the test.
type execServer struct {
	t       *testing.T
	toolbox string
	root    string

	mu   sync.Mutex
	cmds [][]string
}

func (s *execServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !strings.HasPrefix(r.URL.Path, "/api/v1/namespaces/agents/pods/") || !strings.HasSuffix(r.URL.Path, "/exec") {
		http.Error(w, "not an exec request: "+r.URL.Path, http.StatusNotFound)
		return
	}
	q := r.URL.Query()
	cmd := q["command"]
	s.mu.Lock()
	s.cmds = append(s.cmds, cmd)
	s.mu.Unlock()
	if q.Get("container") != ContainerName || len(cmd) == 0 {
		http.Error(w, "bad exec request", http.StatusBadRequest)
		return
	}
	use := func(on bool, t wsstream.ChannelType) wsstream.ChannelType {
		if on {
			return t
		}
		return wsstream.IgnoreChannel
	}
	stdin, stderr := q.Get("stdin") == "true", q.Get("stderr") == "true"
	conn := wsstream.NewConn(map[string]wsstream.ChannelProtocolConfig{
		"v5.channel.k8s.io": {Binary: true, Channels: []wsstream.ChannelType{
			use(stdin, wsstream.ReadChannel), wsstream.WriteChannel, use(stderr, wsstream.WriteChannel),
			wsstream.WriteChannel, use(q.Get("tty") == "true", wsstream.ReadChannel),
		}},
	})
	_, ch, err := conn.Open(w, r)
	if err != nil {
		s.t.Logf("exec server: %v", err)
		return
	}
	defer conn.Close()
	argv := cmd
	if argv[0] == sandbox.ToolboxPath {
		argv = append([]string{s.toolbox}, argv[1:]...)
		if argv[1] == "serve" || argv[1] == "call" {
			argv = append(argv, "-root", s.root)
		}
	}
	c := exec.Command(argv[0], argv[1:]...)
	c.Dir = s.root
	c.WaitDelay = time.Second
	if stdin {
		c.Stdin = ch[0]
	}
	c.Stdout = ch[1]
	if stderr {
		c.Stderr = ch[2]
	}
	st := metav1.Status{Status: metav1.StatusSuccess}
	var ee *exec.ExitError
	if err := c.Run(); errors.As(err, &ee) {
		st = metav1.Status{Status: metav1.StatusFailure, Reason: "NonZeroExitCode", Details: &metav1.StatusDetails{
			Causes: []metav1.StatusCause{{Type: "ExitCode", Message: strconv.Itoa(ee.ExitCode())}},
		}}
	} else if err != nil {
		st = metav1.Status{Status: metav1.StatusFailure, Message: err.Error()}
	}
	b, _ := json.Marshal(st)
	_, _ = ch[3].Write(b)
}

func (s *execServer) ran() [][]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.cmds)
}

// buildToolbox builds cmd/agent-toolbox of the main module (through the
// replace directive) once per test.
func buildToolbox(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "agent-toolbox")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/localagent/agent/cmd/agent-toolbox")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building agent-toolbox: %v\n%s", err, out)
	}
	return bin
}

// execBackend is a Backend whose pods live in the fake clientset and whose
// exec reaches an execServer.
func execBackend(t *testing.T, srv *execServer) (*Backend, *sandbox.Sandbox) {
	t.Helper()
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	b, _ := newBackend(t, running)
	b.opts.Config = &rest.Config{Host: hs.URL}
	spec := baseSpec(t)
	spec.User = "1000:1000"
	sb, err := b.Create(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sb.Close)
	return b, sb
}

func TestExecOverPodsExec(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh")
	}
	srv := &execServer{t: t, root: t.TempDir()}
	b, sb := execBackend(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	var out, errOut bytes.Buffer
	code, err := b.Exec(ctx, sb.ID, sandbox.ExecOptions{
		Cmd:   []string{"sh", "-c", `read x; echo "out:$x"; echo "err:$x" >&2; exit 3`},
		Stdin: strings.NewReader("hello\n"), Stdout: &out, Stderr: &errOut,
		User: sb.User, WorkingDir: "/workspace",
	})
	if err != nil {
		t.Fatal(err)
	}
	if code != 3 || out.String() != "out:hello\n" || errOut.String() != "err:hello\n" {
		t.Errorf("exit %d, stdout %q, stderr %q; want 3, out:hello, err:hello on their own streams", code, out.String(), errOut.String())
	}

	// Through the sandbox package, as the orchestrator runs commands.
	res, err := sb.Run(ctx, "sh", "-c", "echo ok")
	if err != nil || res.ExitCode != 0 || string(res.Stdout) != "ok\n" {
		t.Errorf("Sandbox.Run = %+v, %v", res, err)
	}
}

// The toolbox session is one long-lived exec (OpenStream) carrying every
// tool call, as with the Docker engine. Control: the per-call fallback
// (`agent-toolbox call`) was never used, so the calls did go through the
// session.
func TestToolboxSessionOverPodsExec(t *testing.T) {
	srv := &execServer{t: t, toolbox: buildToolbox(t), root: t.TempDir()}
	_, sb := execBackend(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	resp, err := sb.Tool(ctx, "write_file", json.RawMessage(`{"path":"notes/a.txt","content":"one\ntwo\n"}`))
	if err != nil || resp.IsError {
		t.Fatalf("write_file = %+v, %v", resp, err)
	}
	if b, err := os.ReadFile(filepath.Join(srv.root, "notes", "a.txt")); err != nil || string(b) != "one\ntwo\n" {
		t.Fatalf("the file written through the session: %q, %v", b, err)
	}
	resp, err = sb.Tool(ctx, "read_file", json.RawMessage(`{"path":"notes/a.txt"}`))
	if err != nil || resp.IsError || !strings.Contains(resp.Output, "two") {
		t.Fatalf("read_file = %+v, %v", resp, err)
	}

	var serve, call int
	for _, c := range srv.ran() {
		if len(c) > 1 && c[0] == sandbox.ToolboxPath {
			switch c[1] {
			case "serve":
				serve++
			case "call":
				call++
			}
		}
	}
	if serve != 1 || call != 0 {
		t.Errorf("toolbox runs: %d serve, %d call; want one session and no per-call exec (commands %q)", serve, call, srv.ran())
	}

	// Closing the sandbox ends the session's exec.
	sb.Close()
}
