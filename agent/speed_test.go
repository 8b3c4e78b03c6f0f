package agent

import (
	"testing"
	"time"

	"github.com/localagent/agent/agent/llm"
)

func TestMeasureSpeed(t *testing.T) {
	sent := time.Unix(100, 0)
	first := sent.Add(300 * time.Millisecond)
	done := first.Add(2 * time.Second)
	u := llm.Usage{PromptTokens: 1000, CompletionTokens: 50}

	// Without the server's timings: measured from the stream.
	s := measureSpeed(u, nil, sent, first.UnixNano(), done)
	if s.Server || s.FirstTokenMS != 300 || s.PromptProcessed != 1000 || s.PromptCached != 0 || s.GenTokens != 50 || s.GenMS != 2000 {
		t.Errorf("measured: %+v", s)
	}
	if got := s.GenPerSecond(); got != 25 {
		t.Errorf("measured tok/s = %v, want 25", got)
	}
	// With llama-server's timings, its figures win.
	s = measureSpeed(u, &llm.Timings{PromptN: 200, CacheN: 800, PredictedN: 50, PredictedMS: 500}, sent, first.UnixNano(), done)
	if !s.Server || s.PromptProcessed != 200 || s.PromptCached != 800 || s.GenPerSecond() != 100 || s.FirstTokenMS != 300 {
		t.Errorf("server timings: %+v", s)
	}
	// No delta at all: the first token is the end.
	if s := measureSpeed(u, nil, sent, 0, done); s.FirstTokenMS != 2300 || s.GenMS != 0 || s.GenPerSecond() != 0 {
		t.Errorf("no delta: %+v", s)
	}
}
