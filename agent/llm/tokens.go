package llm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"
)

// ErrCountUnsupported: the server offers no token count (it is not
// llama-server, or an old one).
var ErrCountUnsupported = errors.New("the server does not count tokens")

// countTimeout bounds one count: rendering and tokenizing a prompt takes
// llama-server milliseconds.
const countTimeout = 20 * time.Second

// CountTokens asks llama-server how many tokens req's prompt is, exactly as
// it will be sent: /apply-template renders the messages and tools through
// the model's chat template, /tokenize counts the result. Servers without
// these endpoints answer ErrCountUnsupported; the caller then estimates.
func (c *HTTPClient) CountTokens(ctx context.Context, req Request) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, countTimeout)
	defer cancel()
	var tmpl struct {
		Prompt *string `json:"prompt"`
	}
	if err := c.postJSON(ctx, "/apply-template", newWireRequest(req, c.opts.Model, false), &tmpl); err != nil {
		return 0, err
	}
	if tmpl.Prompt == nil {
		return 0, ErrCountUnsupported
	}
	var tok struct {
		Tokens *[]json.RawMessage `json:"tokens"`
	}
	body := map[string]any{"content": *tmpl.Prompt, "add_special": true, "parse_special": true}
	if err := c.postJSON(ctx, "/tokenize", body, &tok); err != nil {
		return 0, err
	}
	if tok.Tokens == nil {
		return 0, ErrCountUnsupported
	}
	return len(*tok.Tokens), nil
}

// postJSON posts v to the server root's path and decodes a bounded answer.
func (c *HTTPClient) postJSON(ctx context.Context, path string, v, out any) error {
	payload, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode %s request: %w", path, err)
	}
	r, err := http.NewRequestWithContext(ctx, http.MethodPost, c.root+path, bytes.NewReader(payload))
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	c.setHeaders(r)
	resp, err := c.http.Do(r)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusMethodNotAllowed {
		return fmt.Errorf("%w (%s: %s)", ErrCountUnsupported, path, resp.Status)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", path, resp.Status)
	}
	// A prompt of a million tokens is a few MiB of token ids.
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(out); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}
