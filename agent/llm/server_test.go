package llm_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/localagent/agent/agent/llm"
)

func TestServerFactsFromScript(t *testing.T) {
	srv := startScript(t, `
model: coder
slots: 3
n_ctx: 4096
loading: 2
turns: []
`)
	c := newClient(t, srv.URL(), nil)
	ctx := context.Background()
	for i := range 2 {
		h, err := c.Health(ctx)
		if err != nil || h.Ready || !h.Loading || h.StatusCode != 503 || h.Message != "Loading model" {
			t.Fatalf("health %d: %+v %v", i, h, err)
		}
	}
	var polls int
	if err := c.WaitReady(ctx, time.Millisecond, func(llm.Health, error) { polls++ }); err != nil {
		t.Fatal(err)
	}
	if polls != 0 {
		t.Errorf("%d polls after loading ended", polls)
	}
	p, err := c.Props(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if p.TotalSlots != 3 || p.NCtx != 4096 || !p.ChatTemplateCaps["supports_tools"] || p.BuildInfo != "scripted" {
		t.Errorf("props %+v", p)
	}
	info, err := c.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.Model != "scripted/coder" || info.Slots != 3 || info.ContextWindow != 4096 || !info.FromProps || info.Tools == nil || !*info.Tools {
		t.Errorf("info %+v", info)
	}
	models, err := c.Models(ctx)
	if err != nil || len(models) != 1 || models[0].ID != "scripted/coder" {
		t.Errorf("models %+v %v", models, err)
	}
}

// A server without /health and /props (vLLM, OpenAI, LM Studio): readiness
// from /v1/models, defaults for the numbers.
func TestServerFactsFallback(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/models" {
			_, _ = w.Write([]byte(`{"object":"list","data":[{"id":"Qwen/Qwen3-Coder-30B","object":"model","owned_by":"vllm"}]}`))
			return
		}
		http.NotFound(w, r)
	}))
	defer srv.Close()
	c := newClient(t, srv.URL+"/v1", nil)
	h, err := c.Health(context.Background())
	if err != nil || !h.Ready {
		t.Fatalf("health %+v %v", h, err)
	}
	_, err = c.Props(context.Background())
	var e *llm.Error
	if !errors.As(err, &e) || e.StatusCode != 404 {
		t.Fatalf("props err %v", err)
	}
	info, err := c.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := llm.ServerInfo{Model: "Qwen/Qwen3-Coder-30B", ContextWindow: llm.DefaultContextWindow, Slots: llm.DefaultSlots}
	if info != want {
		t.Errorf("info %+v, want %+v", info, want)
	}
}

// llama-server's real /props shape, from its documentation.
func TestPropsLlamaServerShape(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/props":
			_, _ = w.Write([]byte(`{"default_generation_settings":{"id":0,"id_task":-1,"n_ctx":2048,"speculative":false,"is_processing":false,"params":{"n_predict":-1,"temperature":0.8}},
"total_slots":2,"model_alias":"/models/tiny-random.gguf","model_path":"/models/tiny-random.gguf","modalities":{"vision":false,"audio":false},
"chat_template":"{{ x }}","chat_template_caps":{"supports_object_arguments":false,"supports_parallel_tool_calls":false,"supports_preserve_reasoning":false,"supports_string_content":true,"supports_system_role":true,"supports_tool_calls":false,"supports_tools":false,"supports_typed_content":false},
"bos_token":"<s>","eos_token":"</s>","build_info":"b11669-Debian","is_sleeping":false}`))
		case "/health":
			_, _ = w.Write([]byte(`{"status":"ok"}`))
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	c := newClient(t, srv.URL, nil)
	info, err := c.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if info.Model != "tiny-random.gguf" || info.ContextWindow != 2048 || info.Slots != 2 || info.Build != "b11669-Debian" || info.Tools == nil || *info.Tools {
		t.Errorf("info %+v", info)
	}
}

func TestServerFactsUnreachable(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	u := srv.URL
	srv.Close()
	c := newClient(t, u, nil)
	if _, err := c.Health(context.Background()); !errors.Is(err, llm.ErrUnavailable) || !strings.Contains(err.Error(), "is it running") {
		t.Errorf("health: %v", err)
	}
	if _, err := c.Info(context.Background()); !errors.Is(err, llm.ErrUnavailable) {
		t.Errorf("info: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := c.WaitReady(ctx, 10*time.Millisecond, nil); err == nil || !strings.Contains(err.Error(), "not ready") {
		t.Errorf("wait: %v", err)
	}
}

func TestInfoWhileLoading(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(503)
		_, _ = w.Write([]byte(`{"error":{"code":503,"message":"Loading model","type":"unavailable_error"}}`))
	}))
	defer srv.Close()
	c := newClient(t, srv.URL, nil)
	if _, err := c.Info(context.Background()); !errors.Is(err, llm.ErrUnavailable) || !strings.Contains(err.Error(), "Loading model") {
		t.Errorf("info: %v", err)
	}
}

func TestHealthOldLoadingWith200(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(`{"status":"loading model"}`))
	}))
	defer srv.Close()
	h, err := newClient(t, srv.URL, nil).Health(context.Background())
	if err != nil || h.Ready || !h.Loading {
		t.Errorf("%+v %v", h, err)
	}
}
