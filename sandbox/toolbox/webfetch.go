package toolbox

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
	"unicode/utf8"

	"golang.org/x/net/html"
)

// ToolWebFetch fetches a URL through the sandbox's egress proxy.
const ToolWebFetch = "web_fetch"

// WebFetchArgs are the arguments of web_fetch.
type WebFetchArgs struct {
	URL string `json:"url"`
}

const (
	// webFetchBytes caps what is read of a response body.
	webFetchBytes = 2 << 20
	// webFetchText caps the text returned to the model.
	webFetchText = 100 << 10
	webTimeout   = 30 * time.Second
)

// webProxy is the egress proxy the sandbox was given (its environment, set
// by the sandbox's egress wiring); "" when the sandbox has no network.
func (s *Server) webProxy() string {
	if s.WebProxy != "" {
		return s.WebProxy
	}
	for _, k := range []string{"HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"} {
		if v := os.Getenv(k); v != "" {
			return v
		}
	}
	return ""
}

// webFetch GETs a URL through the egress proxy only (never directly: the
// proxy is where the task's policy is enforced and every connection is
// logged), and returns its text: HTML converted to plain text, other text
// as it is, capped.
func (s *Server) webFetch(ctx context.Context, raw json.RawMessage) Response {
	var a WebFetchArgs
	if r := decodeArgs(ToolWebFetch, raw, &a); r != nil {
		return *r
	}
	u, err := url.Parse(strings.TrimSpace(a.URL))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return errorf("invalid arguments for web_fetch: url must be an absolute http or https URL, not %q", a.URL)
	}
	px := s.webProxy()
	if px == "" {
		return errorf("web_fetch: this sandbox has no network access (the task allows no hosts); work with what is in the workspace")
	}
	pu, err := url.Parse(px)
	if err != nil {
		return errorf("web_fetch: the sandbox's proxy setting %q is not a URL", px)
	}
	tr := &http.Transport{
		Proxy: http.ProxyURL(pu),
		// Every connection goes to the proxy; a direct one is refused
		// here as well as by the missing route.
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if addr != pu.Host {
				return nil, fmt.Errorf("direct connection to %s refused: only the egress proxy may be used", addr)
			}
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		},
		ResponseHeaderTimeout: webTimeout,
	}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: webTimeout,
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) >= 5 {
				return errors.New("too many redirects")
			}
			return nil
		}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return errorf("web_fetch: %v", err)
	}
	req.Header.Set("User-Agent", "agent-web-fetch/1")
	req.Header.Set("Accept", "text/html, text/plain, application/json;q=0.9, */*;q=0.5")
	resp, err := client.Do(req)
	if err != nil {
		return errorf("web_fetch %s: %v", u.Redacted(), err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, webFetchBytes+1))
	if err != nil {
		return errorf("web_fetch %s: reading the response: %v", u.Redacted(), err)
	}
	cut := len(body) > webFetchBytes
	if cut {
		body = body[:webFetchBytes]
	}
	if resp.StatusCode == http.StatusForbidden || resp.StatusCode == http.StatusProxyAuthRequired {
		return errorf("web_fetch %s: denied (HTTP %d): %s", u.Redacted(), resp.StatusCode, firstLineOf(body))
	}
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	var text string
	switch {
	case mt == "text/html" || mt == "application/xhtml+xml" || (mt == "" && bytes.Contains(bytes.ToLower(body[:min(len(body), 512)]), []byte("<html"))):
		text = htmlText(body)
	case strings.HasPrefix(mt, "text/") || mt == "application/json" || strings.HasSuffix(mt, "+json") || strings.HasSuffix(mt, "+xml") || mt == "application/xml" || mt == "":
		if !utf8.Valid(body) {
			return errorf("web_fetch %s: the response is not UTF-8 text (%s)", u.Redacted(), mt)
		}
		text = string(body)
	default:
		return errorf("web_fetch %s: the response is %s, not text (%d bytes)", u.Redacted(), mt, len(body))
	}
	truncated := cut
	if len(text) > webFetchText {
		text = text[:webFetchText]
		for !utf8.ValidString(text) {
			text = text[:len(text)-1]
		}
		truncated = true
	}
	head := fmt.Sprintf("HTTP %d %s (%s)\n\n", resp.StatusCode, u.Redacted(), mt)
	if truncated {
		text += "\n[cut: the page is longer]"
	}
	return Response{Output: head + text, IsError: resp.StatusCode >= 400, Truncated: truncated}
}

func firstLineOf(b []byte) string {
	line, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
	if len(line) > 300 {
		line = line[:300]
	}
	return line
}

// htmlText is the readable text of an HTML page: script, style and other
// invisible elements dropped, block elements on their own lines, runs of
// whitespace collapsed.
func htmlText(b []byte) string {
	z := html.NewTokenizer(bytes.NewReader(b))
	var out strings.Builder
	skip := 0
	for {
		switch z.Next() {
		case html.ErrorToken:
			return tidyText(out.String())
		case html.StartTagToken, html.SelfClosingTagToken:
			name, _ := z.TagName()
			switch string(name) {
			case "script", "style", "noscript", "template", "svg", "head":
				skip++
			case "br", "p", "div", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "pre", "section", "article", "table", "ul", "ol", "title":
				out.WriteString("\n")
			}
		case html.EndTagToken:
			name, _ := z.TagName()
			switch string(name) {
			case "script", "style", "noscript", "template", "svg", "head":
				if skip > 0 {
					skip--
				}
			case "p", "div", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "pre", "section", "article", "table", "title":
				out.WriteString("\n")
			}
		case html.TextToken:
			if skip == 0 {
				// Line breaks in the source are not line breaks on the page.
				out.Write(bytes.ReplaceAll(z.Text(), []byte("\n"), []byte(" ")))
			}
		}
	}
}

func tidyText(s string) string {
	var lines []string
	blank := false
	for _, l := range strings.Split(s, "\n") {
		l = strings.Join(strings.Fields(l), " ")
		if l == "" {
			if !blank && len(lines) > 0 {
				lines = append(lines, "")
			}
			blank = true
			continue
		}
		blank = false
		lines = append(lines, l)
	}
	return strings.TrimSpace(strings.Join(lines, "\n"))
}
