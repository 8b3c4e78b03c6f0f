package llm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// benchStream is a reply of n content chunks and n argument fragments, as
// llama-server sends them (one token per chunk).
func benchStream(n int) []byte {
	var b bytes.Buffer
	head := `{"id":"chatcmpl-x","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":`
	for i := range n {
		fmt.Fprintf(&b, "data: %s{\"content\":\"tok%d é \"},\"finish_reason\":null}]}\n\n", head, i)
	}
	fmt.Fprintf(&b, "data: %s{\"tool_calls\":[{\"index\":0,\"id\":\"c\",\"type\":\"function\",\"function\":{\"name\":\"write_file\",\"arguments\":\"\"}}]},\"finish_reason\":null}]}\n\n", head)
	for i := range n {
		fmt.Fprintf(&b, "data: %s{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"line %d\\\\n\"}}]},\"finish_reason\":null}]}\n\n", head, i)
	}
	fmt.Fprintf(&b, "data: %s{},\"finish_reason\":\"tool_calls\"}],\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":2,\"total_tokens\":3}}\n\ndata: [DONE]\n\n", head)
	return b.Bytes()
}

// BenchmarkAssemble measures SSE splitting plus chunk decoding and assembly,
// without the network: the client's own cost per streamed token.
func BenchmarkAssemble(b *testing.B) {
	const n = 1000
	data := benchStream(n)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		a := newAssembler(0, func(Delta) {})
		r := newSSEReader(bytes.NewReader(data))
		for {
			ev, err := r.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
			if string(ev.Data) == "[DONE]" {
				break
			}
			if err := a.add(ev.Data); err != nil {
				b.Fatal(err)
			}
		}
		if resp := a.response(); len(resp.Message.ToolCalls) != 1 {
			b.Fatal("no call")
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*(2*n+2)), "ns/chunk")
}

// BenchmarkStreamHTTP is the same reply through the real client over
// loopback HTTP.
func BenchmarkStreamHTTP(b *testing.B) {
	const n = 1000
	data := benchStream(n)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write(data)
	}))
	defer srv.Close()
	c, err := NewHTTP(Options{BaseURL: srv.URL})
	if err != nil {
		b.Fatal(err)
	}
	req := Request{Messages: []Message{{Role: RoleUser, Content: "hi"}}}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		resp, err := c.Stream(context.Background(), req, func(Delta) {})
		if err != nil || !strings.HasPrefix(resp.Message.Content, "tok0") {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*(2*n+2)), "ns/chunk")
}
