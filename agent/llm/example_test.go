package llm_test

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/localagent/agent/agent/llm"
	"github.com/localagent/agent/agent/scripted"
)

func ExampleHTTPClient_Stream() {
	script, _ := scripted.Parse([]byte(`
turns:
  - text: "Reading it."
    tool_calls: [{name: read_file, arguments: {path: main.go}}]
`))
	ctx := context.Background()
	srv, _ := scripted.Start(ctx, script)
	defer srv.Close()

	c, err := llm.NewHTTP(llm.Options{BaseURL: srv.URL()})
	if err != nil {
		fmt.Println(err)
		return
	}
	var live strings.Builder
	resp, err := c.Stream(ctx, llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Content: "fix main.go"}}},
		func(d llm.Delta) {
			if d.Kind == llm.DeltaText {
				live.WriteString(d.Text) // a renderer would print this as it arrives
			}
		})
	switch {
	case errors.Is(err, llm.ErrContextExceeded):
		fmt.Println("compact and retry")
	case llm.IsRetriable(err):
		fmt.Println("server went away; try again later:", err)
	case err != nil:
		fmt.Println(err)
	default:
		fmt.Println(live.String())
		for _, tc := range resp.Message.ToolCalls {
			fmt.Println(tc.Function.Name, tc.Function.Arguments)
		}
		fmt.Println(resp.FinishReason)
	}
	// Output:
	// Reading it.
	// read_file {"path":"main.go"}
	// tool_calls
}
