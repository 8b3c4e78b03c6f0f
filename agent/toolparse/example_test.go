package toolparse_test

import (
	"fmt"

	"github.com/localagent/agent/agent/toolparse"
)

func ExampleParser_Parse() {
	p := toolparse.New("read_file", "bash")
	r := p.Parse(`<think>Check the tests first.</think>Running them.
<tool_call>{"name": "bash", "arguments": {"command": "go test ./..."}}</tool_call>`)
	fmt.Printf("%q\n", r.Text)
	for _, c := range r.Calls {
		fmt.Println(c.Name, c.Arguments)
	}

	// A cut-off call: ask the model to continue.
	r = p.Parse(`<tool_call>{"name": "bash", "arguments": {"comm`)
	fmt.Println(r.Incomplete, len(r.Calls))

	// JSON naming no offered tool is prose.
	r = p.Parse(`The API returns {"name": "Alice", "arguments": {}}.`)
	fmt.Println(len(r.Calls))
	// Output:
	// "Running them."
	// bash {"command":"go test ./..."}
	// true 0
	// 0
}
