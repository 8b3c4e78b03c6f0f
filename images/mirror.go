package images

import (
	"bufio"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// DefaultMirror is used when neither the configuration nor the host's apt
// sources name a Debian mirror.
const DefaultMirror = "http://deb.debian.org/debian"

// Where the host keeps its apt sources; variables so tests can point them
// at sample files.
var (
	aptSourcesDir  = "/etc/apt/sources.list.d"
	aptSourcesList = "/etc/apt/sources.list"
)

// ResolveMirror picks the Debian mirror debootstrap uses: the configured
// one, else the host's own apt mirror (an air-gapped site usually has a
// local mirror configured there already), else deb.debian.org.
func ResolveMirror(configured string) (string, error) {
	if configured != "" {
		return checkMirror(configured)
	}
	if m := hostMirror(aptSourcesDir, aptSourcesList); m != "" {
		return m, nil
	}
	return DefaultMirror, nil
}

// checkMirror accepts only http(s) and file URLs, and nothing that could
// break out of the quoted build label.
func checkMirror(m string) (string, error) {
	u, err := url.Parse(m)
	if err != nil || u.Host == "" && u.Scheme != "file" {
		return "", fmt.Errorf("mirror %q is not a URL: give one like %s", m, DefaultMirror)
	}
	switch u.Scheme {
	case "http", "https", "file":
	default:
		return "", fmt.Errorf("mirror %q: debootstrap needs an http, https or file URL", m)
	}
	if strings.ContainsAny(m, "\"\\ \t\n") {
		return "", fmt.Errorf("mirror %q contains quotes, backslashes or spaces", m)
	}
	return strings.TrimRight(m, "/"), nil
}

// hostMirror returns the first usable Debian archive URI from the host's
// apt configuration: deb822 .sources files first (the modern format, in
// name order as apt reads them), then the classic sources.list and its
// .list snippets. Security and other suffixed suites (bookworm-security,
// -updates, -backports) live in other archives or carry only a few
// packages, so only an entry for a plain suite counts.
func hostMirror(dir, list string) string {
	var deb822, classic []string
	if entries, err := os.ReadDir(dir); err == nil {
		for _, e := range entries {
			switch {
			case strings.HasSuffix(e.Name(), ".sources"):
				deb822 = append(deb822, filepath.Join(dir, e.Name()))
			case strings.HasSuffix(e.Name(), ".list"):
				classic = append(classic, filepath.Join(dir, e.Name()))
			}
		}
	}
	sort.Strings(deb822)
	sort.Strings(classic)
	for _, p := range deb822 {
		if m := firstMirror(p, parseDeb822); m != "" {
			return m
		}
	}
	for _, p := range append([]string{list}, classic...) {
		if m := firstMirror(p, parseSourcesList); m != "" {
			return m
		}
	}
	return ""
}

func firstMirror(path string, parse func(io.Reader) []aptSource) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	for _, s := range parse(f) {
		if !s.deb || !hasPlainSuite(s.suites) {
			continue
		}
		for _, u := range s.uris {
			if m, err := checkMirror(u); err == nil {
				return m
			}
		}
	}
	return ""
}

// aptSource is one stanza or line of apt configuration.
type aptSource struct {
	deb    bool // Types include "deb" (not only deb-src)
	uris   []string
	suites []string
}

func hasPlainSuite(suites []string) bool {
	for _, s := range suites {
		if s != "" && !strings.Contains(s, "-") && !strings.Contains(s, "/") {
			return true
		}
	}
	return false
}

// parseDeb822 reads the stanzas of a .sources file (sources.list(5),
// "DEB822-STYLE FORMAT"): fields "Name: value", stanzas separated by blank
// lines, '#' comments, continuation lines starting with whitespace, and
// "Enabled: no" to switch a stanza off.
func parseDeb822(r io.Reader) []aptSource {
	var out []aptSource
	fields := map[string]string{}
	last := ""
	flush := func() {
		if len(fields) > 0 && !strings.EqualFold(fields["enabled"], "no") {
			s := aptSource{uris: strings.Fields(fields["uris"]), suites: strings.Fields(fields["suites"])}
			for _, t := range strings.Fields(fields["types"]) {
				if t == "deb" {
					s.deb = true
				}
			}
			out = append(out, s)
		}
		fields = map[string]string{}
		last = ""
	}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.TrimSpace(line) == "":
			flush()
		case strings.HasPrefix(strings.TrimSpace(line), "#"):
		case line[0] == ' ' || line[0] == '\t':
			if last != "" {
				fields[last] += " " + strings.TrimSpace(line)
			}
		default:
			k, v, ok := strings.Cut(line, ":")
			if !ok {
				continue
			}
			last = strings.ToLower(strings.TrimSpace(k))
			fields[last] = strings.TrimSpace(v)
		}
	}
	flush()
	return out
}

// parseSourcesList reads classic one-line entries:
// "deb [ options ] uri suite [component1] ...".
func parseSourcesList(r io.Reader) []aptSource {
	var out []aptSource
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "#")
		f := strings.Fields(line)
		if len(f) < 3 {
			continue
		}
		s := aptSource{deb: f[0] == "deb"}
		rest := f[1:]
		if strings.HasPrefix(rest[0], "[") {
			// Skip the options block, which may span several fields.
			i := 0
			for i < len(rest) && !strings.HasSuffix(rest[i], "]") {
				i++
			}
			rest = rest[min(i+1, len(rest)):]
		}
		if len(rest) < 2 {
			continue
		}
		s.uris = []string{rest[0]}
		s.suites = []string{rest[1]}
		out = append(out, s)
	}
	return out
}
