package orchestrator

import (
	"context"
	"errors"
	"testing"

	"github.com/localagent/agent/agent/scripted"
)

// A task with no endpoint uses the address the running managed server
// publishes (it may have been started with `llm up --port N`), and falls
// back to llm.port only when none is found.
func TestOpenLLMFindsTheManagedServer(t *testing.T) {
	s, err := scripted.Parse([]byte("model: m\nslots: 3\nn_ctx: 4096\nturns:\n  - text: hi\n"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	srv, err := scripted.Start(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()

	asked := 0
	o, err := New(Options{StateDir: t.TempDir(), LLMPort: 1, LLMAddress: func(context.Context) (string, error) {
		asked++
		return srv.URL(), nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	ep, err := o.openLLM(ctx, "", "")
	if err != nil {
		t.Fatalf("the server at the published address was not found: %v", err)
	}
	defer ep.close()
	if ep.url != srv.URL() || ep.slots != 3 || asked != 1 {
		t.Errorf("endpoint %s (%d slots), asked %d times; want %s", ep.url, ep.slots, asked, srv.URL())
	}

	// Control: without the lookup, llm.port (nothing listens on port 1)
	// is all there is.
	o.opts.LLMAddress = func(context.Context) (string, error) { return "", errors.New("no container") }
	if _, err := o.openLLM(ctx, "", ""); err == nil {
		t.Fatal("found a server on port 1")
	}
}
