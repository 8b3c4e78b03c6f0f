package llm

import "testing"

// llama-server sends its speed figures in the last chunk of a stream.
func TestAssemblerKeepsTimings(t *testing.T) {
	a := newAssembler(0, nil)
	for _, c := range []string{
		`{"choices":[{"index":0,"delta":{"content":"hi"}}]}`,
		`{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":10,"completion_tokens":2},` +
			`"timings":{"cache_n":7,"prompt_n":3,"prompt_ms":12.5,"prompt_per_second":240,"predicted_n":2,"predicted_ms":40,"predicted_per_second":50}}`,
	} {
		if err := a.add([]byte(c)); err != nil {
			t.Fatal(err)
		}
	}
	r := a.response()
	want := Timings{PromptN: 3, CacheN: 7, PromptMS: 12.5, PredictedN: 2, PredictedMS: 40, PromptPerSecond: 240, PredictedPerSecond: 50}
	if r.Timings == nil || *r.Timings != want {
		t.Errorf("timings = %+v, want %+v", r.Timings, want)
	}
	// A server without timings: nil, not zeros.
	b := newAssembler(0, nil)
	_ = b.add([]byte(`{"choices":[{"index":0,"delta":{"content":"x"},"finish_reason":"stop"}]}`))
	if r := b.response(); r.Timings != nil {
		t.Errorf("timings without the server sending them: %+v", r.Timings)
	}
}
