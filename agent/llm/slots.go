package llm

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"
)

// SlotAction is what SaveSlot and RestoreSlot ask of llama-server's
// /slots/ID?action=save|restore.
type SlotAction string

const (
	SlotSave    SlotAction = "save"
	SlotRestore SlotAction = "restore"
)

// SlotFile saves or restores the prompt cache of slot id to or from file
// (a bare name, in the directory the server was started with
// --slot-save-path). It returns the number of tokens saved or restored. A
// server without --slot-save-path answers 501; callers treat any error as
// "recompute the prompt instead", which is always correct, only slower.
func (c *HTTPClient) SlotFile(ctx context.Context, id int, action SlotAction, file string) (int, error) {
	rctx, cancel := context.WithTimeout(ctx, 5*time.Minute) // a large KV cache takes a while to write
	defer cancel()
	p := "/slots/" + strconv.Itoa(id) + "?action=" + string(action)
	body, _ := json.Marshal(map[string]string{"filename": file})
	var resp *http.Response
	// llama-server closes idle keep-alive connections; a request sent on
	// one just as it closes fails before the server saw it. Saving and
	// restoring the same file twice is harmless, so one retry is safe.
	for attempt := 0; ; attempt++ {
		req, err := http.NewRequestWithContext(rctx, http.MethodPost, c.root+p, bytes.NewReader(body))
		if err != nil {
			return 0, err
		}
		req.Header.Set("Content-Type", "application/json")
		if c.opts.APIKey != "" {
			req.Header.Set("Authorization", "Bearer "+c.opts.APIKey)
		}
		resp, err = c.http.Do(req)
		if err == nil {
			break
		}
		if attempt == 1 || rctx.Err() != nil {
			return 0, &Error{Kind: KindUnavailable, URL: c.root + p, Message: "cannot reach the server at " + c.root, Err: err}
		}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		return 0, c.getError(p, resp.StatusCode, b)
	}
	var r struct {
		Saved    int `json:"n_saved"`
		Restored int `json:"n_restored"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return 0, fmt.Errorf("slot %s: %w", action, err)
	}
	return r.Saved + r.Restored, nil
}
