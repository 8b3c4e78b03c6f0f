package llm_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/localagent/agent/agent/llm"
)

// A request with a slot carries llama-server's id_slot and cache_prompt; one
// without carries neither (other servers may reject unknown fields). The
// timings object of the last chunk comes back in the response.
func TestSlotPinningAndTimings(t *testing.T) {
	var bodies []map[string]any
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var m map[string]any
		_ = json.Unmarshal(b, &m)
		bodies = append(bodies, m)
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, `data: {"choices":[{"index":0,"delta":{"content":"hi"}}]}`+"\n\n"+
			`data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":148,"completion_tokens":1,"total_tokens":149},`+
			`"timings":{"cache_n":81,"prompt_n":67,"prompt_ms":1.7,"predicted_n":1,"predicted_ms":0.5}}`+"\n\n"+
			"data: [DONE]\n\n")
	}))
	defer srv.Close()
	c, err := llm.NewHTTP(llm.Options{BaseURL: srv.URL, MaxRetries: -1})
	if err != nil {
		t.Fatal(err)
	}
	slot := 1
	resp, err := c.Stream(context.Background(), llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Content: "x"}}, Slot: &slot}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if tm := resp.Timings; tm == nil || tm.CacheN != 81 || tm.PromptN != 67 || tm.PredictedN != 1 {
		t.Errorf("timings = %+v", resp.Timings)
	}
	if _, err := c.Stream(context.Background(), llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Content: "x"}}}, nil); err != nil {
		t.Fatal(err)
	}
	if len(bodies) != 2 || bodies[0]["id_slot"] != float64(1) || bodies[0]["cache_prompt"] != true {
		t.Fatalf("pinned request: %v", bodies)
	}
	if _, ok := bodies[1]["id_slot"]; ok {
		t.Errorf("unpinned request has id_slot: %v", bodies[1])
	}
	if _, ok := bodies[1]["cache_prompt"]; ok {
		t.Errorf("unpinned request has cache_prompt: %v", bodies[1])
	}
}
