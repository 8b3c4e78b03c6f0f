package llm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// Defaults for Options fields left zero.
const (
	DefaultIdleTimeout      = 120 * time.Second
	DefaultFirstByteTimeout = 10 * time.Minute
	DefaultMaxReplyTime     = 30 * time.Minute
	DefaultMaxRetries       = 4
	DefaultRetryBackoff     = 500 * time.Millisecond
	DefaultMaxRetryBackoff  = 10 * time.Second
	DefaultMaxReplyBytes    = 32 << 20
)

// Options configure an HTTPClient. Zero values take the defaults above;
// a negative timeout or MaxRetries disables that mechanism.
type Options struct {
	// BaseURL is the server's address: "http://127.0.0.1:8080", with or
	// without a trailing "/v1".
	BaseURL string
	// APIKey, when set, is sent as "Authorization: Bearer KEY".
	APIKey string
	// Model is sent when a Request names none. llama-server ignores it;
	// OpenAI, vLLM and Ollama need it.
	Model string
	// HTTPClient carries the requests; its Timeout must be zero (a whole
	// streamed reply can take minutes). Default: a client without timeout.
	HTTPClient *http.Client
	// IdleTimeout ends a reply that makes no progress for this long once
	// the reply has started. Progress is an SSE field (a data, event or
	// error line) or a byte of a JSON body; keep-alive comments are not
	// progress, so a server that sends only comments is stopped.
	IdleTimeout time.Duration
	// MaxReplyTime bounds one reply from sending the request to its last
	// byte, however steadily it streams.
	MaxReplyTime time.Duration
	// FirstByteTimeout bounds the wait for the first byte of a reply.
	// llama-server sends nothing while it processes the prompt, which takes
	// minutes for a long prompt on a CPU: keep this generous.
	FirstByteTimeout time.Duration
	// MaxRetries is how many times a request is sent again after a
	// connection error or a 429/502/503/504 before any reply byte arrived.
	// A reply that has started is never retried.
	MaxRetries int
	// RetryBackoff is the first pause between retries; it doubles each time
	// (with jitter) up to MaxRetryBackoff. A Retry-After header is honoured
	// within the same cap.
	RetryBackoff    time.Duration
	MaxRetryBackoff time.Duration
	// MaxReplyBytes caps the streamed payload of one reply, so a model that
	// loops forever ends with an error instead of exhausting memory.
	MaxReplyBytes int
	// OnRetry, if set, is called before each retry (for a "server loading,
	// retrying" notice). It must not block.
	OnRetry func(attempt int, wait time.Duration, err error)
	// Logger receives debug records (retries, probes). Default: discard.
	Logger *slog.Logger
}

// HTTPClient is a Client for OpenAI-compatible servers over HTTP. It is safe
// for concurrent use: sub-agents share one.
type HTTPClient struct {
	opts Options
	root string // scheme://host[:port][/prefix], without /v1
	http *http.Client
	log  *slog.Logger
	seq  atomic.Uint64
}

var _ Client = (*HTTPClient)(nil)

// NewHTTP returns a client for the server at opts.BaseURL.
func NewHTTP(opts Options) (*HTTPClient, error) {
	u, err := url.Parse(strings.TrimSpace(opts.BaseURL))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("LLM server URL %q is not valid: give it as http://HOST:PORT (e.g. http://127.0.0.1:8080)", opts.BaseURL)
	}
	u.RawQuery, u.Fragment = "", ""
	root := strings.TrimRight(u.String(), "/")
	root = strings.TrimSuffix(root, "/v1")
	applyDefaults(&opts)
	c := &HTTPClient{opts: opts, root: root, http: opts.HTTPClient, log: opts.Logger}
	if c.http == nil {
		c.http = &http.Client{Transport: defaultTransport()}
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	return c, nil
}

// defaultTransport is http.DefaultTransport with a shorter dial timeout: a
// server that does not answer the TCP handshake in 10 s is not there, and
// the retry loop should say so quickly rather than after 30 s per attempt.
func defaultTransport() http.RoundTripper {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.DialContext = (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	return t
}

func applyDefaults(o *Options) {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&o.IdleTimeout, DefaultIdleTimeout)
	def(&o.FirstByteTimeout, DefaultFirstByteTimeout)
	def(&o.MaxReplyTime, DefaultMaxReplyTime)
	def(&o.RetryBackoff, DefaultRetryBackoff)
	def(&o.MaxRetryBackoff, DefaultMaxRetryBackoff)
	if o.MaxRetries == 0 {
		o.MaxRetries = DefaultMaxRetries
	}
	if o.MaxReplyBytes == 0 {
		o.MaxReplyBytes = DefaultMaxReplyBytes
	}
}

// BaseURL is the server root the client talks to (without /v1).
func (c *HTTPClient) BaseURL() string { return c.root }

// Stream implements Client. On error the Response holds whatever was
// assembled before the failure (check Error.Partial). Cancelling ctx stops
// this generation only; the error then wraps ctx's error. onDelta runs on
// the reading goroutine and must return quickly: time spent in it counts
// against the idle timeout.
func (c *HTTPClient) Stream(ctx context.Context, req Request, onDelta func(Delta)) (Response, error) {
	payload, err := json.Marshal(newWireRequest(req, c.opts.Model, true))
	if err != nil {
		return Response{}, fmt.Errorf("encode chat request: %w", err)
	}
	withTools := len(req.Tools) > 0
	id := c.seq.Add(1)
	for attempt := 0; ; attempt++ {
		asm := newAssembler(c.opts.MaxReplyBytes, onDelta)
		resp, started, err := c.streamOnce(ctx, payload, withTools, asm)
		if err == nil {
			if asm.chunks == 0 {
				return c.probe(ctx, req, onDelta, started)
			}
			return resp, nil
		}
		if ctx.Err() != nil {
			return resp, fmt.Errorf("chat request cancelled: %w", context.Cause(ctx))
		}
		var e *Error
		retry := errors.As(err, &e) && e.Kind == KindUnavailable && !asm.output && asm.chunks == 0
		if !retry || c.opts.MaxRetries < 0 || attempt >= c.opts.MaxRetries {
			return resp, err
		}
		wait := c.backoff(attempt, e)
		c.log.Debug("llm: retrying chat request", "request", id, "attempt", attempt+1, "wait", wait, "err", err)
		if c.opts.OnRetry != nil {
			c.opts.OnRetry(attempt+1, wait, err)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return resp, fmt.Errorf("chat request cancelled while waiting to retry: %w", context.Cause(ctx))
		case <-t.C:
		}
	}
}

func (c *HTTPClient) backoff(attempt int, e *Error) time.Duration {
	d := c.opts.RetryBackoff << attempt
	if e != nil && e.retryAfter > 0 {
		d = e.retryAfter
	}
	// Up to 25% jitter so parallel sub-agents do not retry in lockstep.
	d += time.Duration(rand.Int64N(int64(d)/4 + 1))
	return min(d, c.opts.MaxRetryBackoff)
}

var (
	errFirstByte = errors.New("first-byte timeout")
	errIdle      = errors.New("idle timeout")
	errTotal     = errors.New("reply time limit")
)

// limitReply ends rctx with errTotal after MaxReplyTime; call the stop
// function when the reply is done.
func (c *HTTPClient) limitReply(cancel context.CancelCauseFunc) func() bool {
	if c.opts.MaxReplyTime <= 0 {
		return func() bool { return false }
	}
	return time.AfterFunc(c.opts.MaxReplyTime, func() { cancel(errTotal) }).Stop
}

// streamOnce sends one streaming request. started reports whether the
// server answered 200 (the reply began, possibly empty).
func (c *HTTPClient) streamOnce(ctx context.Context, payload []byte, withTools bool, asm *assembler) (Response, bool, error) {
	rctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	defer c.limitReply(cancel)()
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	// One timer serves both timeouts; what it means when it fires depends
	// on whether the reply has made progress.
	var gotByte atomic.Bool
	fire := func() {
		if gotByte.Load() {
			cancel(errIdle)
		} else {
			cancel(errFirstByte)
		}
	}
	if c.opts.FirstByteTimeout > 0 {
		timer = time.AfterFunc(c.opts.FirstByteTimeout, fire)
	}
	endpoint := c.root + "/v1/chat/completions"
	hreq, err := http.NewRequestWithContext(rctx, http.MethodPost, endpoint, bytes.NewReader(payload))
	if err != nil {
		return Response{}, false, fmt.Errorf("build chat request: %w", err)
	}
	c.setHeaders(hreq)
	hreq.Header.Set("Accept", "text/event-stream")
	hresp, err := c.http.Do(hreq)
	if err != nil {
		return Response{}, false, c.transportError(rctx, endpoint, err, false, false)
	}
	defer hresp.Body.Close()
	if hresp.StatusCode != http.StatusOK {
		return Response{}, false, c.statusError(rctx, endpoint, hresp, withTools)
	}
	body := io.Reader(hresp.Body)
	progress := func() {}
	if timer != nil || c.opts.IdleTimeout > 0 {
		progress = func() {
			gotByte.Store(true)
			if c.opts.IdleTimeout <= 0 {
				if timer != nil {
					timer.Stop()
				}
				return
			}
			if timer == nil {
				timer = time.AfterFunc(c.opts.IdleTimeout, fire)
				return
			}
			timer.Reset(c.opts.IdleTimeout)
		}
	}
	if ct, _, _ := mime.ParseMediaType(hresp.Header.Get("Content-Type")); ct == "application/json" {
		// The server ignored "stream": a whole completion (or an error
		// object) in one JSON body; every byte of it is progress.
		body = &activityReader{r: body, onData: progress}
		data, err := io.ReadAll(io.LimitReader(body, int64(c.opts.MaxReplyBytes)+1))
		if err != nil {
			return asm.response(), true, c.transportError(rctx, endpoint, err, true, asm.output)
		}
		if err := asm.add(data); err != nil {
			return asm.response(), true, withURL(err, endpoint)
		}
		return asm.response(), true, nil
	}
	sr := newSSEReader(body)
	sr.onField = progress
	done := false
	for !done {
		ev, err := sr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return asm.response(), true, c.transportError(rctx, endpoint, err, true, asm.output)
		}
		data := bytes.TrimSpace(ev.Data)
		if ev.Event == "error" {
			msg, typ := serverError(data)
			if msg == "" {
				msg = "the server sent an error event without a message"
			}
			return asm.response(), true, &Error{Kind: classifyStatus(0, typ, msg, withTools), Message: msg, Type: typ, URL: endpoint, Partial: asm.output}
		}
		switch {
		case len(data) == 0:
			continue
		case string(data) == "[DONE]":
			done = true
			continue
		}
		if err := asm.add(data); err != nil {
			var e *Error
			if ev.Cut && errors.As(err, &e) && e.Kind == KindProtocol {
				return asm.response(), true, &Error{Kind: KindUnavailable, URL: endpoint, Partial: asm.output,
					Message: "the stream was cut off in the middle of a chunk"}
			}
			return asm.response(), true, withURL(err, endpoint)
		}
	}
	// Nothing after [DONE] is read: a server that keeps the stream open
	// would block here. Closing an unfinished body costs a new connection
	// for the next request, which is cheap next to a generation.
	resp := asm.response()
	if !done && asm.chunks > 0 && asm.finish == "" {
		// Without [DONE] or a finish_reason the reply may be incomplete:
		// the server crashed or a proxy dropped the connection.
		return resp, true, &Error{Kind: KindUnavailable, URL: endpoint, Partial: asm.output,
			Message: "the stream ended before the reply was finished (no finish_reason, no [DONE]); the server may have crashed"}
	}
	return resp, true, nil
}

// probe is called when a 200 stream carried no chunk at all. One
// non-streaming request shows the server's real error (or, if that works,
// serves as the reply).
func (c *HTTPClient) probe(ctx context.Context, req Request, onDelta func(Delta), started bool) (Response, error) {
	c.log.Debug("llm: empty stream, probing without streaming", "started", started)
	resp, err := c.complete(ctx, req, onDelta)
	if err == nil {
		return resp, nil
	}
	if ctx.Err() != nil {
		return resp, fmt.Errorf("chat request cancelled: %w", context.Cause(ctx))
	}
	var e *Error
	if errors.As(err, &e) && e.Kind != KindEmptyStream {
		e.Message = "empty stream; a non-streaming retry said: " + e.Message
		return resp, e
	}
	return resp, &Error{Kind: KindEmptyStream, URL: c.root + "/v1/chat/completions",
		Message: "the server answered 200 with an empty stream, and a non-streaming request gave no reply either; check the server's log", Err: err}
}

// complete sends one non-streaming request (no retries) and delivers the
// reply's parts through onDelta.
func (c *HTTPClient) complete(ctx context.Context, req Request, onDelta func(Delta)) (Response, error) {
	payload, err := json.Marshal(newWireRequest(req, c.opts.Model, false))
	if err != nil {
		return Response{}, fmt.Errorf("encode chat request: %w", err)
	}
	rctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	defer c.limitReply(cancel)()
	if c.opts.FirstByteTimeout > 0 {
		t := time.AfterFunc(c.opts.FirstByteTimeout, func() { cancel(errFirstByte) })
		defer t.Stop()
	}
	endpoint := c.root + "/v1/chat/completions"
	hreq, err := http.NewRequestWithContext(rctx, http.MethodPost, endpoint, bytes.NewReader(payload))
	if err != nil {
		return Response{}, fmt.Errorf("build chat request: %w", err)
	}
	c.setHeaders(hreq)
	hresp, err := c.http.Do(hreq)
	if err != nil {
		return Response{}, c.transportError(rctx, endpoint, err, false, false)
	}
	defer hresp.Body.Close()
	if hresp.StatusCode != http.StatusOK {
		return Response{}, c.statusError(rctx, endpoint, hresp, len(req.Tools) > 0)
	}
	data, err := io.ReadAll(io.LimitReader(hresp.Body, int64(c.opts.MaxReplyBytes)+1))
	if err != nil {
		return Response{}, c.transportError(rctx, endpoint, err, true, false)
	}
	asm := newAssembler(c.opts.MaxReplyBytes, onDelta)
	if len(bytes.TrimSpace(data)) == 0 {
		return Response{}, &Error{Kind: KindEmptyStream, URL: endpoint, StatusCode: hresp.StatusCode, Message: "empty body"}
	}
	if err := asm.add(data); err != nil {
		return asm.response(), withURL(err, endpoint)
	}
	if asm.chunks == 0 {
		return Response{}, &Error{Kind: KindEmptyStream, URL: endpoint, Message: "no reply in the body"}
	}
	return asm.response(), nil
}

func (c *HTTPClient) setHeaders(r *http.Request) {
	r.Header.Set("Content-Type", "application/json")
	if c.opts.APIKey != "" {
		r.Header.Set("Authorization", "Bearer "+c.opts.APIKey)
	}
}

// statusError turns a non-200 answer into an *Error with the server's
// message.
func (c *HTTPClient) statusError(ctx context.Context, endpoint string, r *http.Response, withTools bool) error {
	body, err := io.ReadAll(io.LimitReader(r.Body, 64<<10))
	if err != nil && ctx.Err() != nil {
		return c.transportError(ctx, endpoint, err, true, false)
	}
	msg, typ := serverError(body)
	if msg == "" {
		msg = http.StatusText(r.StatusCode)
	}
	e := &Error{Kind: classifyStatus(r.StatusCode, typ, msg, withTools), StatusCode: r.StatusCode, Message: msg, Type: typ, URL: endpoint}
	if s := r.Header.Get("Retry-After"); s != "" {
		if secs, err := strconv.Atoi(s); err == nil && secs > 0 {
			e.retryAfter = time.Duration(secs) * time.Second
		}
	}
	return e
}

// transportError classifies a failed request or body read: our own timers
// first, then the caller's cancellation, then the network.
func (c *HTTPClient) transportError(ctx context.Context, endpoint string, err error, started, partial bool) error {
	switch cause := context.Cause(ctx); {
	case errors.Is(cause, errFirstByte):
		return &Error{Kind: KindTimeout, URL: endpoint, Partial: partial,
			Message: fmt.Sprintf("no reply within %s (first-byte timeout); a long prompt on a slow machine may need a larger timeout", c.opts.FirstByteTimeout)}
	case errors.Is(cause, errIdle):
		return &Error{Kind: KindTimeout, URL: endpoint, Partial: partial,
			Message: fmt.Sprintf("the reply stalled: no progress for %s (idle timeout; keep-alive comments do not count)", c.opts.IdleTimeout)}
	case errors.Is(cause, errTotal):
		return &Error{Kind: KindTimeout, URL: endpoint, Partial: partial,
			Message: fmt.Sprintf("the reply took longer than %s (max reply time); the turn can be tried again", c.opts.MaxReplyTime)}
	case cause != nil:
		return fmt.Errorf("chat request cancelled: %w", cause)
	}
	msg := "cannot reach the server at " + c.root + "; is it running?"
	if started {
		msg = "the connection broke in the middle of the reply"
	} else {
		var ne net.Error
		if errors.As(err, &ne) && !ne.Timeout() && !isDialError(err) {
			msg = "the connection to " + c.root + " failed"
		}
	}
	return &Error{Kind: KindUnavailable, URL: endpoint, Partial: partial, Message: msg, Err: err}
}

func isDialError(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

func withURL(err error, endpoint string) error {
	var e *Error
	if errors.As(err, &e) && e.URL == "" {
		e.URL = endpoint
	}
	return err
}

// activityReader calls onData after every read that returned bytes; it
// drives the idle timer.
type activityReader struct {
	r      io.Reader
	onData func()
}

func (a *activityReader) Read(p []byte) (int, error) {
	n, err := a.r.Read(p)
	if n > 0 {
		a.onData()
	}
	return n, err
}
