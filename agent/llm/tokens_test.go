package llm

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestCountTokens(t *testing.T) {
	var rendered string
	mux := http.NewServeMux()
	mux.HandleFunc("POST /apply-template", func(w http.ResponseWriter, r *http.Request) {
		var req wireRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.Messages) != 2 || len(req.Tools) != 1 {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		rendered = "<|im_start|>system\n" + req.Messages[0].Content + "<|im_end|>\n<|im_start|>user\n" + req.Messages[1].Content + "<|im_end|>\n"
		_ = json.NewEncoder(w).Encode(map[string]string{"prompt": rendered})
	})
	mux.HandleFunc("POST /tokenize", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Content string `json:"content"`
		}
		_ = json.NewDecoder(r.Body).Decode(&req)
		if req.Content != rendered {
			http.Error(w, "not the rendered prompt", http.StatusBadRequest)
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"tokens": make([]int, len(strings.Fields(req.Content)))})
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	c, err := NewHTTP(Options{BaseURL: srv.URL + "/v1"})
	if err != nil {
		t.Fatal(err)
	}
	req := Request{Messages: []Message{{Role: RoleSystem, Content: "be brief"}, {Role: RoleUser, Content: "say hi now"}},
		Tools: []Tool{{Type: "function", Function: FunctionDef{Name: "bash"}}}}
	n, err := c.CountTokens(t.Context(), req)
	if err != nil || n != 7 {
		t.Fatalf("count = %d, %v; want 7", n, err)
	}

	// Another OpenAI-compatible server: no such endpoints.
	other := httptest.NewServer(http.NotFoundHandler())
	defer other.Close()
	c, _ = NewHTTP(Options{BaseURL: other.URL})
	if _, err := c.CountTokens(t.Context(), req); !errors.Is(err, ErrCountUnsupported) {
		t.Fatalf("err = %v, want ErrCountUnsupported", err)
	}
}
