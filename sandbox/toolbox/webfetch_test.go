package toolbox

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// fakeProxy is an HTTP proxy that allows one host and logs every request,
// as the task's egress proxy does.
func fakeProxy(t *testing.T, allowed string) (*httptest.Server, func() []string) {
	var mu sync.Mutex
	var log []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		log = append(log, r.Method+" "+r.URL.String())
		mu.Unlock()
		if r.URL.Host != allowed {
			http.Error(w, "egress denied: "+r.URL.Host+" is not in the allowlist", http.StatusForbidden)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write([]byte(`<html><head><title>Docs</title><style>p{}</style><script>alert("x")</script></head>
<body><h1>Install</h1><p>Run   <code>make</code>
 now.</p><ul><li>one</li><li>two</li></ul></body></html>`))
	}))
	t.Cleanup(srv.Close)
	return srv, func() []string { mu.Lock(); defer mu.Unlock(); return append([]string(nil), log...) }
}

func TestWebFetchThroughProxy(t *testing.T) {
	px, log := fakeProxy(t, "docs.example")
	s := newTestServer(t)
	s.WebProxy = px.URL
	r := call(t, s, ToolWebFetch, WebFetchArgs{URL: "http://docs.example/install"})
	check(t, r, false, "HTTP 200", "Install", "Run make now.", "one", "two")
	if strings.Contains(r.Output, "alert") || strings.Contains(r.Output, "p{}") || strings.Contains(r.Output, "<") {
		t.Errorf("script, style or tags left in the text:\n%s", r.Output)
	}
	r = call(t, s, ToolWebFetch, WebFetchArgs{URL: "http://evil.example/x"})
	check(t, r, true, "denied (HTTP 403)", "not in the allowlist")
	if got := log(); len(got) != 2 || !strings.Contains(got[1], "evil.example") {
		t.Errorf("proxy log = %q", got)
	}
	check(t, call(t, s, ToolWebFetch, WebFetchArgs{URL: "file:///etc/passwd"}), true, "http or https URL")
}

func TestWebFetchWithoutNetwork(t *testing.T) {
	for _, k := range []string{"HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"} {
		t.Setenv(k, "")
	}
	s := newTestServer(t)
	check(t, call(t, s, ToolWebFetch, WebFetchArgs{URL: "http://docs.example/"}), true, "no network access")
}
