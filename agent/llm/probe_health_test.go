package llm_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/localagent/agent/agent/llm"
)

// ProbeHealth asks /health alone: the managed llama-server's readiness
// must never come from /v1/models, which answers before the model is
// loaded. Control: Health, for arbitrary servers, does take a 404 on
// /health plus an answering /v1/models as ready.
func TestProbeHealth(t *testing.T) {
	var status atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/v1/models":
			_, _ = w.Write([]byte(`{"data":[{"id":"m"}]}`))
		case r.URL.Path != "/health":
			http.NotFound(w, r)
		case status.Load() == 503:
			w.WriteHeader(503)
			_, _ = w.Write([]byte(`{"error":{"code":503,"message":"Loading model","type":"unavailable_error"}}`))
		case status.Load() == 200:
			_, _ = w.Write([]byte(`{"status":"ok"}`))
		default:
			w.WriteHeader(404)
		}
	}))
	defer srv.Close()
	c, err := llm.NewHTTP(llm.Options{BaseURL: srv.URL, MaxRetries: -1})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		code           int32
		ready, loading bool
		msg            string
	}{
		{503, false, true, "Loading model"},
		{200, true, false, "ok"},
		{404, false, false, "Not Found"},
	} {
		status.Store(tc.code)
		h, err := c.ProbeHealth(t.Context())
		if err != nil || h.Ready != tc.ready || h.Loading != tc.loading || !strings.Contains(h.Message, tc.msg) {
			t.Errorf("HTTP %d: %+v, %v", tc.code, h, err)
		}
	}
	// Control: the same 404 is "ready" for Health, through /v1/models.
	if h, err := c.Health(t.Context()); err != nil || !h.Ready {
		t.Errorf("Health with no /health but /v1/models: %+v, %v", h, err)
	}
	srv.Close()
	if _, err := c.ProbeHealth(t.Context()); err == nil {
		t.Error("a closed server answered")
	}
}
