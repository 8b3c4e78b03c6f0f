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

// commentsForever starts a server that sends one chunk of a reply and then
// only SSE keep-alive comments, every 20 ms, until the client goes away.
func commentsForever(t *testing.T, firstChunk bool) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		if firstChunk {
			_, _ = w.Write([]byte(`data: {"choices":[{"index":0,"delta":{"content":"partial"}}]}` + "\n\n"))
		}
		for {
			if _, err := w.Write([]byte(": keep-alive\n\n")); err != nil {
				return
			}
			if rc.Flush() != nil {
				return
			}
			select {
			case <-r.Context().Done():
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestCommentsAreNotProgress: a server that streams keep-alive comments
// forever after the reply started no longer holds the turn forever (every
// comment used to reset the idle timer); the error is a retriable timeout.
func TestCommentsAreNotProgress(t *testing.T) {
	srv := commentsForever(t, true)
	c := newClient(t, srv.URL, func(o *llm.Options) { o.IdleTimeout = 300 * time.Millisecond; o.MaxReplyTime = time.Hour })
	start := time.Now()
	resp, err := c.Stream(context.Background(), userReq("hi"), nil)
	if el := time.Since(start); el > 10*time.Second {
		t.Fatalf("took %s", el)
	}
	if !errors.Is(err, llm.ErrTimeout) || !llm.IsRetriable(err) || !strings.Contains(err.Error(), "no progress") {
		t.Fatalf("err %v; want a retriable idle timeout", err)
	}
	if resp.Message.Content != "partial" {
		t.Errorf("partial reply %q", resp.Message.Content)
	}
}

// TestOnlyCommentsHitFirstByteTimeout: comments from the very start count
// as no reply at all.
func TestOnlyCommentsHitFirstByteTimeout(t *testing.T) {
	srv := commentsForever(t, false)
	c := newClient(t, srv.URL, func(o *llm.Options) {
		o.FirstByteTimeout = 300 * time.Millisecond
		o.IdleTimeout = time.Hour
		o.MaxReplyTime = time.Hour
	})
	_, err := c.Stream(context.Background(), userReq("hi"), nil)
	if !errors.Is(err, llm.ErrTimeout) || !strings.Contains(err.Error(), "first-byte timeout") {
		t.Fatalf("err %v", err)
	}
}

// TestMaxReplyTime: a reply that keeps making progress but never ends is
// cut at the configured total time.
func TestMaxReplyTime(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		for {
			if _, err := w.Write([]byte(`data: {"choices":[{"index":0,"delta":{"content":"x"}}]}` + "\n\n")); err != nil {
				return
			}
			if rc.Flush() != nil {
				return
			}
			select {
			case <-r.Context().Done():
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}))
	defer srv.Close()
	c := newClient(t, srv.URL, func(o *llm.Options) { o.IdleTimeout = time.Second; o.MaxReplyTime = 400 * time.Millisecond })
	start := time.Now()
	_, err := c.Stream(context.Background(), userReq("hi"), nil)
	if !errors.Is(err, llm.ErrTimeout) || !llm.IsRetriable(err) || !strings.Contains(err.Error(), "max reply time") {
		t.Fatalf("err %v; want a retriable max-reply-time error", err)
	}
	if el := time.Since(start); el > 10*time.Second {
		t.Errorf("took %s", el)
	}
}
