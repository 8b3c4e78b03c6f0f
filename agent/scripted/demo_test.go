package scripted_test

import (
	"context"
	"testing"

	"github.com/localagent/agent/agent/llm"
	"github.com/localagent/agent/agent/scripted"
)

// The demo script plays through the real client, with its expectations met.
func TestDemoScript(t *testing.T) {
	s, err := scripted.Load("testdata/demo.yaml")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv, err := scripted.Start(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	c, err := llm.NewHTTP(llm.Options{BaseURL: srv.URL()})
	if err != nil {
		t.Fatal(err)
	}
	info, err := c.Info(ctx)
	if err != nil || info.Model != "scripted/demo" || info.Slots != 2 || info.ContextWindow != 16384 {
		t.Fatalf("info %+v %v", info, err)
	}
	results := map[string]string{"read_file": "#!/bin/sh\necho $((1 + 1))\n", "edit_file": "edited", "bash": "4\n"}
	msgs := []llm.Message{{Role: llm.RoleSystem, Content: "You are a coding agent."}, {Role: llm.RoleUser, Content: "make calc.sh print 4"}}
	for turn := 1; turn <= 4; turn++ {
		resp, err := c.Stream(ctx, llm.Request{Messages: msgs}, nil)
		if err != nil {
			t.Fatalf("turn %d: %v", turn, err)
		}
		msgs = append(msgs, resp.Message)
		for _, tc := range resp.Message.ToolCalls {
			msgs = append(msgs, llm.Message{Role: llm.RoleTool, ToolCallID: tc.ID, Content: results[tc.Function.Name]})
		}
		if turn == 4 && (resp.Message.Content != "calc.sh now prints 4 (I ran it to check)." || len(resp.Message.ToolCalls) != 0) {
			t.Errorf("last turn %+v", resp.Message)
		}
	}
	if m := srv.Mismatches(); len(m) > 0 {
		t.Fatal(m)
	}
	resp, err := c.Stream(ctx, llm.Request{Messages: msgs}, nil)
	if err != nil || resp.Message.Content != "(scripted model) The script has no more turns." {
		t.Errorf("final: %+v %v", resp, err)
	}
}
