package llamaserver

import (
	"context"
	"testing"

	"github.com/localagent/agent/agent/llm"
	"github.com/localagent/agent/images"
)

// The agent sizes a request by llama-server's count of its prompt
// (/apply-template, then /tokenize): it must be the count the server then
// processes, which the reply's usage reports.
func TestCountTokensMatchesUsage(t *testing.T) {
	it := newITest(t)
	requireImage(t, it.cli, images.LlamaServer, "llama-server")
	res, err := it.m.Up(context.Background(), it.options(images.LlamaServer, "none"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := llm.NewHTTP(llm.Options{BaseURL: res.URL})
	if err != nil {
		t.Fatal(err)
	}
	req := llm.Request{MaxTokens: 2, Messages: []llm.Message{
		{Role: llm.RoleSystem, Content: "You are a coding agent working in a sandbox. Follow the rules of the repository."},
		{Role: llm.RoleUser, Content: "Fix the failing test in main_test.go: `func TestAdd(t *testing.T) { if add(2, 2) != 4 { t.Fatal(\"add\") } }`"},
	}}
	n, err := c.CountTokens(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Stream(context.Background(), req, nil)
	if err != nil {
		t.Fatal(err)
	}
	if n != resp.Usage.PromptTokens || n == 0 {
		t.Fatalf("counted %d tokens, the server processed %d", n, resp.Usage.PromptTokens)
	}
	bytes := 0
	for _, m := range req.Messages {
		bytes += len(m.Content)
	}
	t.Logf("prompt of %d bytes: %d tokens counted and processed (4 bytes a token would say %d)", bytes, n, bytes/4)
}
