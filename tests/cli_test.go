package tests

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/rogpeppe/go-internal/testscript"
)

// TestCLIScripts drives the command line's conventions through the
// scripts in testdata/cli: --help examples, the --json shapes (golden
// field sets, errors included), exit codes, tasks filters, discard
// without a terminal, completion, config, NO_COLOR/TERM=dumb and widths.
// Extra commands besides TestTaskScripts':
//
//	jsonkeys FILE       prints the sorted key paths of the JSON in FILE
//	                    (the last line, for JSON lines); lists show as []
//	maxwidth N FILE     no line of FILE is wider than N columns
//	noesc FILE          FILE holds no ESC byte
//	helpall             every command's --help has an example
//	exitcode N CMD...   runs CMD (like exec) and wants exit code N
func TestCLIScripts(t *testing.T) {
	runScripts(t, filepath.Join("testdata", "cli"))
}

func cmdJSONKeys(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 1 {
		ts.Fatalf("usage: jsonkeys FILE")
	}
	data := strings.TrimSpace(ts.ReadFile(args[0]))
	if i := strings.LastIndex(data, "\n{"); i >= 0 && !strings.HasPrefix(data, "{\n") {
		data = data[i+1:] // JSON lines: the last object
	}
	var v any
	if err := json.Unmarshal([]byte(data), &v); err != nil {
		ts.Fatalf("%s is not JSON: %v\n%s", args[0], err, data)
	}
	set := map[string]bool{}
	keyPaths(v, "", set)
	keys := make([]string, 0, len(set))
	for k := range set {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	fmt.Fprintln(ts.Stdout(), strings.Join(keys, "\n"))
}

// keyPaths collects "a.b", "a.list[]", "a.list[].c". A null list has no
// "[]" entry, so a golden file tells it from an empty one. The keys of a
// "labels" map are data, not shape, and are left out.
func keyPaths(v any, prefix string, set map[string]bool) {
	switch x := v.(type) {
	case map[string]any:
		for k, val := range x {
			p := k
			if prefix != "" {
				p = prefix + "." + k
			}
			set[p] = true
			if k == "labels" {
				continue // a map of arbitrary keys, not part of the shape
			}
			keyPaths(val, p, set)
		}
	case []any:
		set[prefix+"[]"] = true
		for _, e := range x {
			keyPaths(e, prefix+"[]", set)
		}
	}
}

func cmdMaxWidth(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 2 {
		ts.Fatalf("usage: maxwidth N FILE")
	}
	n, err := strconv.Atoi(args[0])
	ts.Check(err)
	for i, l := range strings.Split(ts.ReadFile(args[1]), "\n") {
		if w := utf8.RuneCountInString(l); w > n {
			ts.Fatalf("%s line %d is %d columns (max %d): %q", args[1], i+1, w, n, l)
		}
	}
}

func cmdNoEsc(ts *testscript.TestScript, neg bool, args []string) {
	for _, f := range args {
		has := strings.ContainsRune(ts.ReadFile(f), 0x1b)
		if has != neg {
			if neg {
				ts.Fatalf("%s has no ESC byte", f)
			}
			ts.Fatalf("%s holds an ESC byte: %q", f, ts.ReadFile(f))
		}
	}
}

// cmdHelpAll walks the command tree through `agent help` output and checks
// each command's --help for an Examples section.
func cmdHelpAll(ts *testscript.TestScript, neg bool, args []string) {
	var walk func(path []string) int
	walk = func(path []string) int {
		cmd := exec.Command(filepath.Join(agentDir(ts), "agent"), append(path, "--help")...)
		cmd.Env = []string{"PATH=" + ts.Getenv("PATH"), "HOME=" + ts.Getenv("HOME"),
			"AGENT_STATE_DIR=" + ts.Getenv("AGENT_STATE_DIR"), "XDG_CONFIG_HOME=" + ts.Getenv("XDG_CONFIG_HOME")}
		out, err := cmd.CombinedOutput()
		if err != nil {
			ts.Fatalf("agent %s --help: %v\n%s", strings.Join(path, " "), err, out)
		}
		text := string(out)
		if !strings.Contains(text, "\nExamples:\n") {
			ts.Fatalf("agent %s --help has no example:\n%s", strings.Join(path, " "), text)
		}
		n := 1
		_, cmds, ok := strings.Cut(text, "\nAvailable Commands:\n")
		if !ok {
			return n
		}
		cmds, _, _ = strings.Cut(cmds, "\n\n")
		for _, l := range strings.Split(cmds, "\n") {
			if f := strings.Fields(l); len(f) > 0 {
				n += walk(append(append([]string{}, path...), f[0]))
			}
		}
		return n
	}
	fmt.Fprintf(ts.Stdout(), "%d commands have examples\n", walk(nil))
}

// agentDir is the directory of the agent binary on the script's PATH.
func agentDir(ts *testscript.TestScript) string {
	for _, d := range filepath.SplitList(ts.Getenv("PATH")) {
		if fi, err := os.Stat(filepath.Join(d, "agent")); err == nil && !fi.IsDir() {
			return d
		}
	}
	ts.Fatalf("no agent on the script's PATH")
	return ""
}

func cmdExitCode(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) < 2 {
		ts.Fatalf("usage: exitcode N CMD [ARGS...]")
	}
	want, err := strconv.Atoi(args[0])
	ts.Check(err)
	err = ts.Exec(args[1], args[2:]...)
	got := 0
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			ts.Fatalf("%s: %v", args[1], err)
		}
		got = ee.ExitCode()
	}
	if got != want {
		ts.Fatalf("%s exited %d, want %d", strings.Join(args[1:], " "), got, want)
	}
}
