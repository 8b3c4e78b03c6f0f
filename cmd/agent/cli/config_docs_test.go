package cli

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// Every configuration key is described (agent config) and in README's
// table, with the right answer to "may a repository set it".
func TestEveryConfigKeyDocumented(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(moduleRoot(), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string][]string{}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "| `") {
			cells := strings.Split(l, "|")
			rows[strings.Trim(strings.TrimSpace(cells[1]), "`")] = cells
		}
	}
	keys := knownKeys()
	if len(keys) < 20 {
		t.Fatalf("only %d keys known: %v", len(keys), keys)
	}
	for _, k := range keys {
		if keyDocs[k] == "" {
			t.Errorf("%s has no description in keyDocs", k)
		}
		cells, ok := rows[k]
		if !ok {
			t.Errorf("README's configuration table lacks %s", k)
			continue
		}
		if want := slices.Contains(projectKeys, k); (strings.TrimSpace(cells[3]) == "yes") != want {
			t.Errorf("README says project %q for %s; a repository may set it: %v", cells[3], k, want)
		}
	}
	for k := range keyDocs {
		if !slices.Contains(keys, k) {
			t.Errorf("keyDocs describes %s, which is not a key", k)
		}
	}
}

func TestUnknownKeySuggestion(t *testing.T) {
	for key, want := range map[string]string{
		"sandbox.memroy": `did you mean "sandbox.memory"`,
		"llm.modle":      `did you mean "llm.model"`,
		"memory":         `did you mean "sandbox.memory"`,
		"agent.max_iter": `did you mean "agent.max_iterations"`,
	} {
		err := checkKey(key)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("checkKey(%q) = %v, want %q", key, err, want)
		}
	}
	if err := checkKey("sandbox.memory"); err != nil {
		t.Errorf("a known key: %v", err)
	}
}

// Every command's --help has an example.
func TestEveryCommandHasExample(t *testing.T) {
	ios, _, _, _ := TestStreams()
	root := NewCmdRoot(NewFactory(ios))
	for _, c := range allCommands(root) {
		if c.Hidden || c.Name() == "__complete" || c.Name() == "__completeNoDesc" {
			continue
		}
		if strings.TrimSpace(c.Example) == "" {
			t.Errorf("%s has no example", c.CommandPath())
		}
	}
}
