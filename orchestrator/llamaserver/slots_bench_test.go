package llamaserver

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/localagent/agent/agent/llm"
	"github.com/localagent/agent/images"
)

// Two agent loops on a two-slot server, each turn appending a reply and a
// tool result to its own conversation, both starting from the same long
// system prompt (as sub-agents do). Each scenario runs once with every
// request pinned to its agent's slot and once letting the server choose,
// on the same server; the prompt tokens the server processed per turn
// (its timings' prompt_n) are printed side by side. Pinned, every turn
// after the first processes only what it appended.
//
// Scenarios: the two agents' turns at once; and one in which agent 1
// compacts its conversation after every turn (a summary request on an
// unrelated prompt, then a shorter history) while agent 0 carries on.
// Both run on the server's default settings (recent builds keep idle
// slots' prompts in a host-memory cache, --cache-ram) and with that cache
// off, as older builds run.
func TestSlotPinningBench(t *testing.T) {
	it := newITest(t)
	requireImage(t, it.cli, images.LlamaServer, "llama-server")
	var b strings.Builder
	for _, cfg := range []struct {
		name  string
		extra []string
	}{{"default settings", nil}, {"--cache-ram 0", []string{"--cache-ram", "0"}}} {
		o := it.options(images.LlamaServer, "none")
		o.Ctx, o.Parallel, o.ExtraArgs = 16384, 2, cfg.extra
		res, err := it.m.Up(context.Background(), o)
		if err != nil {
			t.Fatal(err)
		}
		c, err := llm.NewHTTP(llm.Options{BaseURL: res.URL})
		if err != nil {
			t.Fatal(err)
		}
		for _, sc := range []struct {
			name    string
			compact bool
		}{{"two agents at once", false}, {"agent 1 compacting after every turn", true}} {
			// Unpinned first, so the pinned run cannot profit from a warmer
			// cache; every run has conversations of its own.
			unpinned := benchRun(t, c, false, sc.compact, "unpinned "+cfg.name+sc.name)
			pinned := benchRun(t, c, true, sc.compact, "pinned "+cfg.name+sc.name)
			benchTable(t, &b, res.Build+", "+cfg.name+", --parallel 2, "+sc.name, unpinned, pinned, sc.compact)
		}
		if insp, err := it.cli.ContainerInspect(context.Background(), res.ID); err == nil && insp.RestartCount > 0 {
			t.Errorf("the server restarted %d times", insp.RestartCount)
		}
	}
	t.Log("\n" + b.String())
}

type benchTurn struct{ prompt, processed, cached int }

const benchTurns = 6

var benchSystem = "You are a coding agent working in a sandbox. " + strings.Repeat("Follow the rules of the repository. ", 40)

// benchRun runs the two agents for benchTurns rounds.
func benchRun(t *testing.T, c *llm.HTTPClient, pinned, compact bool, tag string) [2][benchTurns]benchTurn {
	var out [2][benchTurns]benchTurn
	var msgs [2][]llm.Message
	for a := range 2 {
		msgs[a] = []llm.Message{{Role: llm.RoleSystem, Content: benchSystem}, {Role: llm.RoleUser, Content: fmt.Sprintf("Task %d (%s): fix test %d.", a, tag, a)}}
	}
	send := func(a int, m []llm.Message) (benchTurn, bool) {
		req := llm.Request{Messages: m, MaxTokens: 4}
		if pinned {
			slot := a
			req.Slot = &slot
		}
		resp, err := c.Stream(context.Background(), req, nil)
		if err != nil || resp.Timings == nil {
			t.Errorf("agent %d: %v (timings %v)", a, err, resp.Timings)
			return benchTurn{}, false
		}
		return benchTurn{resp.Usage.PromptTokens, resp.Timings.PromptN, resp.Timings.CacheN}, true
	}
	for k := range benchTurns {
		var wg sync.WaitGroup
		for a := range 2 {
			wg.Add(1)
			turn := func() {
				defer wg.Done()
				r, ok := send(a, msgs[a])
				if !ok {
					return
				}
				out[a][k] = r
				// What the agent appends: its reply and a tool result.
				msgs[a] = append(msgs[a],
					llm.Message{Role: llm.RoleAssistant, Content: fmt.Sprintf("Running the tests of %d, step %d.", a, k)},
					llm.Message{Role: llm.RoleUser, Content: fmt.Sprintf("exit 1: test_%d_%d failed: expected %d got %d", a, k, k, k+1)})
			}
			if compact {
				turn() // one after the other: the summary request meets idle slots
			} else {
				go turn()
			}
		}
		wg.Wait()
		if compact {
			// Agent 1 compacts: a summary request, then a history of the
			// system prompt, the summary and the last exchange.
			summary := []llm.Message{{Role: llm.RoleSystem, Content: "Summarise the conversation for a checkpoint."},
				{Role: llm.RoleUser, Content: fmt.Sprintf("<conversation>%s</conversation>", strings.Repeat(fmt.Sprintf("turn %d of %s; ", k, tag), 20))}}
			if _, ok := send(1, summary); !ok {
				return out
			}
			n := len(msgs[1])
			msgs[1] = append([]llm.Message{msgs[1][0], {Role: llm.RoleUser, Content: fmt.Sprintf("Checkpoint %d of %s.", k, tag)}}, msgs[1][n-2:]...)
		}
	}
	return out
}

func benchTable(t *testing.T, b *strings.Builder, what string, unpinned, pinned [2][benchTurns]benchTurn, compact bool) {
	t.Helper()
	fmt.Fprintf(b, "prompt tokens processed per turn (timings.prompt_n): llama-server %s\n", what)
	fmt.Fprintf(b, "turn | agent | prompt | unpinned processed/cached | pinned processed/cached\n")
	var sumU, sumP [2]int
	for k := range benchTurns {
		for a := range 2 {
			u, p := unpinned[a][k], pinned[a][k]
			fmt.Fprintf(b, "%4d | %5d | %6d | %9d / %-13d | %7d / %d\n", k+1, a, p.prompt, u.processed, u.cached, p.processed, p.cached)
			if k > 0 {
				sumU[a] += u.processed
				sumP[a] += p.processed
			}
			// Pinned, a turn of a conversation that only grew processes
			// what it appended (~160 tokens of this byte-vocabulary model,
			// with the template's markers), never the conversation again.
			if k > 0 && (a == 0 || !compact) && (p.cached == 0 || p.processed > p.prompt/4) {
				t.Errorf("%s: pinned agent %d turn %d processed %d of %d prompt tokens (cached %d)", what, a, k+1, p.processed, p.prompt, p.cached)
			}
		}
	}
	fmt.Fprintf(b, "turns 2-%d processed: agent 0 unpinned %d, pinned %d; agent 1 unpinned %d, pinned %d\n\n", benchTurns, sumU[0], sumP[0], sumU[1], sumP[1])
}

// The parent agent's slot, lent to a sub-agent, is saved first and
// restored after: its next turn takes its conversation from the cache. The
// control lends the slot without saving it, and the turn processes the
// whole conversation again.
func TestSlotSaveRestore(t *testing.T) {
	it := newITest(t)
	requireImage(t, it.cli, images.LlamaServer, "llama-server")
	o := it.options(images.LlamaServer, "none")
	o.Ctx, o.Parallel = 8192, 2
	// Without the host-memory prompt cache, so that only the slot file can
	// bring the conversation back.
	o.ExtraArgs = []string{"--cache-ram", "0"}
	res, err := it.m.Up(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	c, err := llm.NewHTTP(llm.Options{BaseURL: res.URL})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	zero := 0
	send := func(msgs []llm.Message) *llm.Timings {
		t.Helper()
		resp, err := c.Stream(ctx, llm.Request{Messages: msgs, MaxTokens: 4, Slot: &zero}, nil)
		if err != nil || resp.Timings == nil {
			t.Fatalf("request: %v", err)
		}
		return resp.Timings
	}
	for _, save := range []bool{false, true} {
		parent := []llm.Message{{Role: llm.RoleSystem, Content: benchSystem}, {Role: llm.RoleUser, Content: fmt.Sprintf("Parent task (save %v).", save)}}
		send(parent)
		file := fmt.Sprintf("test-%s-%v.slot", it.id, save)
		if save {
			if n, err := c.SlotFile(ctx, 0, llm.SlotSave, file); err != nil || n == 0 {
				t.Fatalf("save: %d tokens, %v", n, err)
			}
		}
		// A sub-agent uses slot 0 meanwhile.
		send([]llm.Message{{Role: llm.RoleUser, Content: strings.Repeat(fmt.Sprintf("sub-agent work %v ", save), 40)}})
		if save {
			if n, err := c.SlotFile(ctx, 0, llm.SlotRestore, file); err != nil || n == 0 {
				t.Fatalf("restore: %d tokens, %v", n, err)
			}
		}
		parent = append(parent, llm.Message{Role: llm.RoleAssistant, Content: "ok"}, llm.Message{Role: llm.RoleUser, Content: "next"})
		tm := send(parent)
		t.Logf("save/restore %v: the parent's next turn processed %d, took %d from the cache", save, tm.PromptN, tm.CacheN)
		if save && (tm.CacheN < 1000 || tm.PromptN > 200) {
			t.Errorf("after restore: processed %d, cached %d", tm.PromptN, tm.CacheN)
		}
		if !save && tm.PromptN < 1000 {
			t.Errorf("control: the lent slot still held the parent's prompt (processed %d, cached %d): the test shows nothing", tm.PromptN, tm.CacheN)
		}
	}
}
