package toolparse

import (
	"strings"
	"testing"
)

// A long reply with prose, code and one call: the common case.
func BenchmarkParseTypical(b *testing.B) {
	text := strings.Repeat("Some explanation of the change, with `code` and {braces}.\n```go\nfunc f() { return }\n```\n", 200) +
		`<tool_call>{"name":"bash","arguments":{"command":"go test ./..."}}</tool_call>`
	p := New(tools...)
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		if r := p.Parse(text); len(r.Calls) != 1 {
			b.Fatal(r.Calls)
		}
	}
}

// Many unterminated JSON strings: each start is tried and fails at the end
// of the text; the attempt cap bounds the cost.
func BenchmarkParsePathological(b *testing.B) {
	text := strings.Repeat(`{"a `, 50000)
	p := New(tools...)
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		_ = p.Parse(text)
	}
}
