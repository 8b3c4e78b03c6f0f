package llm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path"
	"strings"
	"time"
)

// Defaults used by ServerInfo when the server does not say.
const (
	// DefaultContextWindow is a conservative per-slot window: small enough
	// for any server people run a coding model on.
	DefaultContextWindow = 8192
	// DefaultSlots assumes one request at a time.
	DefaultSlots = 1
)

// Health is the server's readiness.
type Health struct {
	// Ready: the server answers chat requests now.
	Ready bool
	// Loading: the server is up but still loading the model (llama-server
	// answers /health with 503 while it loads, for minutes on big models).
	Loading bool
	// StatusCode is the HTTP status of the answer.
	StatusCode int
	// Message is the server's status or error text.
	Message string
}

// Health asks the server whether it is ready. llama-server's /health is
// authoritative (503 while loading). A server without /health (404) is
// asked for /v1/models instead, which on such servers means ready. The error
// is set only when the server cannot be reached or answers nonsense.
func (c *HTTPClient) Health(ctx context.Context) (Health, error) {
	h, err := c.ProbeHealth(ctx)
	if err != nil || h.StatusCode != http.StatusNotFound {
		return h, err
	}
	if _, err := c.Models(ctx); err != nil {
		return Health{StatusCode: h.StatusCode, Message: err.Error()}, nil
	}
	return Health{Ready: true, StatusCode: http.StatusOK, Message: "ok (no /health; /v1/models answered)"}, nil
}

// ProbeHealth asks llama-server's /health and nothing else: no fallback to
// /v1/models, which answers before the model is loaded. It is for a server
// known to be llama-server (the managed one); Health is for any endpoint.
func (c *HTTPClient) ProbeHealth(ctx context.Context) (Health, error) {
	status, body, err := c.get(ctx, "/health")
	if err != nil {
		return Health{}, err
	}
	switch status {
	case http.StatusOK:
		msg := "ok"
		var s struct {
			Status string `json:"status"`
		}
		if json.Unmarshal(body, &s) == nil && s.Status != "" {
			msg = s.Status
		}
		if strings.Contains(strings.ToLower(msg), "loading") {
			// Old llama-server builds said so with a 200.
			return Health{Loading: true, StatusCode: status, Message: msg}, nil
		}
		return Health{Ready: true, StatusCode: status, Message: msg}, nil
	case http.StatusServiceUnavailable:
		msg, _ := serverError(body)
		if msg == "" {
			msg = "Loading model"
		}
		return Health{Loading: true, StatusCode: status, Message: msg}, nil
	default:
		msg, _ := serverError(body)
		if msg == "" {
			msg = http.StatusText(status)
		}
		return Health{StatusCode: status, Message: msg}, nil
	}
}

// WaitReady polls Health every interval until the server is ready or ctx
// ends (give it a deadline: loading a big model takes minutes). progress,
// if set, is called with each non-ready state, for a progress display.
func (c *HTTPClient) WaitReady(ctx context.Context, interval time.Duration, progress func(Health, error)) error {
	if interval <= 0 {
		interval = 500 * time.Millisecond
	}
	for {
		h, err := c.Health(ctx)
		if err == nil && h.Ready {
			return nil
		}
		if progress != nil {
			progress(h, err)
		}
		t := time.NewTimer(interval)
		select {
		case <-ctx.Done():
			t.Stop()
			if err == nil {
				err = fmt.Errorf("%s (HTTP %d)", h.Message, h.StatusCode)
			}
			return fmt.Errorf("LLM server at %s not ready: %w (last state: %w)", c.root, context.Cause(ctx), err)
		case <-t.C:
		}
	}
}

// Props is what llama-server reports on /props. Fields a server does not
// send stay zero.
type Props struct {
	// TotalSlots is the number of parallel sequences (--parallel).
	TotalSlots int `json:"total_slots"`
	// NCtx is the context window of one slot (ctx-size / parallel).
	NCtx int `json:"n_ctx"`
	// ChatTemplateCaps says what the chat template supports, e.g.
	// "supports_tools", "supports_tool_calls", "supports_parallel_tool_calls".
	ChatTemplateCaps map[string]bool `json:"chat_template_caps,omitempty"`
	BuildInfo        string          `json:"build_info,omitempty"`
	ModelPath        string          `json:"model_path,omitempty"`
	ModelAlias       string          `json:"model_alias,omitempty"`
	IsSleeping       bool            `json:"is_sleeping,omitempty"`
}

// Props reads llama-server's /props. Other servers answer 404: the error
// then matches ErrServer with StatusCode 404, and ServerInfo falls back.
func (c *HTTPClient) Props(ctx context.Context) (Props, error) {
	status, body, err := c.get(ctx, "/props")
	if err != nil {
		return Props{}, err
	}
	if status != http.StatusOK {
		return Props{}, c.getError("/props", status, body)
	}
	var w struct {
		TotalSlots                int    `json:"total_slots"`
		BuildInfo                 string `json:"build_info"`
		ModelPath                 string `json:"model_path"`
		ModelAlias                string `json:"model_alias"`
		IsSleeping                bool   `json:"is_sleeping"`
		DefaultGenerationSettings struct {
			NCtx int `json:"n_ctx"`
		} `json:"default_generation_settings"`
		// Values are not all booleans in every build: decode loosely.
		ChatTemplateCaps map[string]any `json:"chat_template_caps"`
	}
	if err := json.Unmarshal(body, &w); err != nil {
		return Props{}, &Error{Kind: KindProtocol, URL: c.root + "/props", Message: "cannot parse /props", Err: err}
	}
	p := Props{
		TotalSlots: w.TotalSlots, NCtx: w.DefaultGenerationSettings.NCtx,
		BuildInfo: w.BuildInfo, ModelPath: w.ModelPath, ModelAlias: w.ModelAlias, IsSleeping: w.IsSleeping,
	}
	for k, v := range w.ChatTemplateCaps {
		if b, ok := v.(bool); ok {
			if p.ChatTemplateCaps == nil {
				p.ChatTemplateCaps = map[string]bool{}
			}
			p.ChatTemplateCaps[k] = b
		}
	}
	return p, nil
}

// Model is one entry of /v1/models.
type Model struct {
	ID      string `json:"id"`
	OwnedBy string `json:"owned_by,omitempty"`
}

// Models lists /v1/models. On llama-server it may answer before the model
// is loaded: never use it for readiness there.
func (c *HTTPClient) Models(ctx context.Context) ([]Model, error) {
	status, body, err := c.get(ctx, "/v1/models")
	if err != nil {
		return nil, err
	}
	if status != http.StatusOK {
		return nil, c.getError("/v1/models", status, body)
	}
	var w struct {
		Data []Model `json:"data"`
	}
	if err := json.Unmarshal(body, &w); err != nil {
		return nil, &Error{Kind: KindProtocol, URL: c.root + "/v1/models", Message: "cannot parse /v1/models", Err: err}
	}
	return w.Data, nil
}

// ServerInfo summarises what the agent needs to know about a server.
type ServerInfo struct {
	// Model is the model's name (llama-server: alias or file name).
	Model string `json:"model"`
	// ContextWindow is the per-slot context in tokens: the budget of one
	// conversation.
	ContextWindow int `json:"context_window"`
	// Slots is how many requests the server runs in parallel: the bound on
	// concurrent sub-agents.
	Slots int `json:"slots"`
	// FromProps is set when the numbers came from llama-server's /props;
	// otherwise they are the defaults.
	FromProps bool `json:"from_props"`
	// Tools is the chat template's "supports_tools", when known.
	Tools *bool `json:"tools,omitempty"`
	// Build is the server's build string, when known.
	Build string `json:"build,omitempty"`
}

// Info gathers ServerInfo: /props where the server has it, /v1/models for
// the model name otherwise, defaults for what neither says. It fails when
// the server cannot be reached or is still loading (ErrUnavailable).
func (c *HTTPClient) Info(ctx context.Context) (ServerInfo, error) {
	info := ServerInfo{ContextWindow: DefaultContextWindow, Slots: DefaultSlots}
	p, perr := c.Props(ctx)
	if perr == nil {
		info.FromProps = true
		if p.NCtx > 0 {
			info.ContextWindow = p.NCtx
		}
		if p.TotalSlots > 0 {
			info.Slots = p.TotalSlots
		}
		info.Build = p.BuildInfo
		if v, ok := p.ChatTemplateCaps["supports_tools"]; ok {
			info.Tools = &v
		}
		switch {
		case p.ModelAlias != "" && p.ModelAlias != p.ModelPath:
			info.Model = p.ModelAlias
		case p.ModelPath != "":
			// Without --alias, llama-server reports the path as the alias:
			// the file name is what a person recognises.
			info.Model = path.Base(strings.ReplaceAll(p.ModelPath, "\\", "/"))
		}
	} else if errors.Is(perr, ErrUnavailable) {
		// Unreachable, or loading (503): the numbers are not knowable yet.
		return info, fmt.Errorf("server info: %w", perr)
	}
	if info.Model == "" {
		models, err := c.Models(ctx)
		if err == nil && len(models) > 0 {
			info.Model = models[0].ID
		} else if perr != nil && err != nil {
			return info, fmt.Errorf("server info: %w", err)
		}
	}
	if info.Model == "" {
		info.Model = c.opts.Model
	}
	return info, nil
}

// get fetches a small document from the server root. Status errors are the
// caller's to interpret; only transport failures are errors here.
func (c *HTTPClient) get(ctx context.Context, p string) (int, []byte, error) {
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	u := c.root + p
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, nil, fmt.Errorf("build request for %s: %w", u, err)
	}
	if c.opts.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.opts.APIKey)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return 0, nil, fmt.Errorf("GET %s cancelled: %w", u, context.Cause(ctx))
		}
		return 0, nil, &Error{Kind: KindUnavailable, URL: u, Message: "cannot reach the server at " + c.root + "; is it running?", Err: err}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return 0, nil, &Error{Kind: KindUnavailable, URL: u, Message: "reading the answer failed", Err: err}
	}
	return resp.StatusCode, body, nil
}

func (c *HTTPClient) getError(p string, status int, body []byte) error {
	msg, typ := serverError(body)
	if msg == "" {
		msg = http.StatusText(status)
	}
	return &Error{Kind: classifyStatus(status, typ, msg, false), StatusCode: status, Message: msg, Type: typ, URL: c.root + p}
}
