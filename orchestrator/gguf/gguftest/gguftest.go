package gguftest

import (
	"fmt"
	"math/rand/v2"
	"os"

	"github.com/localagent/agent/orchestrator/gguf"
)

// Options shape the model. Zero values pick small defaults.
type Options struct {
	// ContextLength is llama.context_length, the trained context
	// (default 32768, so tests can ask for large --ctx without warnings).
	ContextLength uint32
	// Layers is the number of transformer blocks (default 2).
	Layers int
	// Seed makes the random weights reproducible.
	Seed uint64
	// NeverEOS shapes the weights so that the end-of-sequence token is
	// never sampled: replies run to max_tokens or the context's end, which
	// tests that interrupt a reply in flight rely on.
	NeverEOS bool
}

// Model dimensions: just large enough for ggml's kernels to be happy.
const (
	embd  = 64
	heads = 4
	ff    = 128
)

// chatML is a minimal chat template, so --jinja has one to render.
const chatML = "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"

// WriteLlama writes a tiny llama-architecture model to path.
func WriteLlama(path string, o Options) error {
	if o.ContextLength == 0 {
		o.ContextLength = 32768
	}
	if o.Layers == 0 {
		o.Layers = 2
	}
	// SentencePiece-style vocabulary: <unk>, <s>, </s>, then one token per
	// byte (<0x00>..<0xFF>), so any text tokenizes through byte fallback.
	tokens := []string{"<unk>", "<s>", "</s>"}
	types := []int32{2, 3, 3} // UNKNOWN, CONTROL, CONTROL
	for b := 0; b < 256; b++ {
		tokens = append(tokens, fmt.Sprintf("<0x%02X>", b))
		types = append(types, 6) // BYTE
	}
	scores := make([]float32, len(tokens))
	vocab := uint64(len(tokens))

	kvs := []gguf.KV{
		{Key: "general.architecture", Value: "llama"},
		{Key: "general.name", Value: "agent-test-tiny-llama"},
		{Key: "general.alignment", Value: uint32(gguf.Alignment)},
		{Key: "llama.context_length", Value: o.ContextLength},
		{Key: "llama.embedding_length", Value: uint32(embd)},
		{Key: "llama.block_count", Value: uint32(o.Layers)},
		{Key: "llama.feed_forward_length", Value: uint32(ff)},
		{Key: "llama.attention.head_count", Value: uint32(heads)},
		{Key: "llama.attention.head_count_kv", Value: uint32(heads)},
		{Key: "llama.rope.dimension_count", Value: uint32(embd / heads)},
		{Key: "llama.attention.layer_norm_rms_epsilon", Value: float32(1e-5)},
		{Key: "llama.vocab_size", Value: uint32(vocab)},
		{Key: "tokenizer.ggml.model", Value: "llama"},
		{Key: "tokenizer.ggml.tokens", Value: tokens},
		{Key: "tokenizer.ggml.scores", Value: scores},
		{Key: "tokenizer.ggml.token_type", Value: types},
		{Key: "tokenizer.ggml.unknown_token_id", Value: uint32(0)},
		{Key: "tokenizer.ggml.bos_token_id", Value: uint32(1)},
		{Key: "tokenizer.ggml.eos_token_id", Value: uint32(2)},
		{Key: "tokenizer.ggml.add_bos_token", Value: true},
		{Key: "tokenizer.chat_template", Value: chatML},
	}

	rng := rand.New(rand.NewPCG(o.Seed, 0x9e3779b97f4a7c15))
	random := func(dims ...uint64) []float32 {
		n := uint64(1)
		for _, d := range dims {
			n *= d
		}
		out := make([]float32, n)
		for i := range out {
			out[i] = float32(rng.NormFloat64() * 0.02)
		}
		return out
	}
	ones := func(n uint64) []float32 {
		out := make([]float32, n)
		for i := range out {
			out[i] = 1
		}
		return out
	}
	t := func(name string, data []float32, dims ...uint64) gguf.Tensor {
		return gguf.Tensor{Name: name, Dims: dims, Data: data}
	}
	tensors := []gguf.Tensor{
		t("token_embd.weight", random(embd, vocab), embd, vocab),
		t("output_norm.weight", ones(embd), embd),
		t("output.weight", random(embd, vocab), embd, vocab),
	}
	if o.NeverEOS {
		// Residual dimension 0 is 1.0 in every token's embedding and no
		// layer writes to it (row 0 of attn_output and ffn_down is zero),
		// so after the final norm it is large and positive for every
		// position. EOS's output row weighs it at -8: its logit sits far
		// below every other token's, under top-k and min-p cut-offs.
		emb := tensors[0].Data
		for tok := uint64(0); tok < vocab; tok++ {
			emb[tok*embd] = 1
		}
		out := tensors[2].Data
		out[2*embd] = -8 // token 2 is </s>
	}
	for l := 0; l < o.Layers; l++ {
		p := fmt.Sprintf("blk.%d.", l)
		attnOut, ffnDown := random(embd, embd), random(ff, embd)
		if o.NeverEOS {
			clear(attnOut[:embd])
			clear(ffnDown[:ff])
		}
		tensors = append(tensors,
			t(p+"attn_norm.weight", ones(embd), embd),
			t(p+"attn_q.weight", random(embd, embd), embd, embd),
			t(p+"attn_k.weight", random(embd, embd), embd, embd),
			t(p+"attn_v.weight", random(embd, embd), embd, embd),
			t(p+"attn_output.weight", attnOut, embd, embd),
			t(p+"ffn_norm.weight", ones(embd), embd),
			t(p+"ffn_gate.weight", random(embd, ff), embd, ff),
			t(p+"ffn_down.weight", ffnDown, ff, embd),
			t(p+"ffn_up.weight", random(embd, ff), embd, ff),
		)
	}

	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("gguftest: %w", err)
	}
	if err := gguf.Write(f, kvs, tensors); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("gguftest: %w", err)
	}
	return nil
}
