package gguf_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/localagent/agent/orchestrator/gguf"
	"github.com/localagent/agent/orchestrator/gguf/gguftest"
)

func TestReadTinyLlama(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tiny.gguf")
	if err := gguftest.WriteLlama(path, gguftest.Options{ContextLength: 4096}); err != nil {
		t.Fatal(err)
	}
	h, err := gguf.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := os.Stat(path)
	if h.Version != 3 || h.Architecture != "llama" || h.ContextLength != 4096 || h.Size != st.Size() {
		t.Fatalf("header = %+v", h)
	}
	if h.TensorCount != 3+2*9 || h.KVCount != 21 {
		t.Fatalf("counts: %d tensors, %d kvs", h.TensorCount, h.KVCount)
	}
	if h.ArrayLengths["tokenizer.ggml.tokens"] != 259 {
		t.Fatalf("tokens array length = %d", h.ArrayLengths["tokenizer.ggml.tokens"])
	}
	if n, ok := h.Uint("llama.embedding_length"); !ok || n != 64 {
		t.Fatalf("embedding_length = %d %v", n, ok)
	}
	if h.Name != "agent-test-tiny-llama" {
		t.Fatalf("name = %q", h.Name)
	}
}

func TestRoundTripAllValueTypes(t *testing.T) {
	kvs := []gguf.KV{
		{Key: "general.architecture", Value: "test"},
		{Key: "u8", Value: uint8(1)}, {Key: "i8", Value: int8(-2)},
		{Key: "u16", Value: uint16(3)}, {Key: "i16", Value: int16(-4)},
		{Key: "u32", Value: uint32(5)}, {Key: "i32", Value: int32(-6)},
		{Key: "u64", Value: uint64(7)}, {Key: "i64", Value: int64(-8)},
		{Key: "f32", Value: float32(1.5)}, {Key: "f64", Value: 2.5},
		{Key: "b", Value: true},
		{Key: "as", Value: []string{"a", "bc"}}, {Key: "af", Value: []float32{1, 2, 3}},
		{Key: "ai", Value: []int32{1}}, {Key: "au", Value: []uint32{1, 2}},
		{Key: "test.context_length", Value: uint64(123)},
	}
	var buf bytes.Buffer
	if err := gguf.Write(&buf, kvs, []gguf.Tensor{{Name: "x", Dims: []uint64{2, 2}, Data: []float32{1, 2, 3, 4}}}); err != nil {
		t.Fatal(err)
	}
	h, err := gguf.Read(bytes.NewReader(buf.Bytes()), int64(buf.Len()))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"u8": uint8(1), "i8": int8(-2), "u16": uint16(3), "i16": int16(-4), "u32": uint32(5),
		"i32": int32(-6), "u64": uint64(7), "i64": int64(-8), "f32": float32(1.5), "f64": 2.5, "b": true,
	}
	for k, v := range want {
		if h.Metadata[k] != v {
			t.Errorf("%s = %#v, want %#v", k, h.Metadata[k], v)
		}
	}
	if h.ArrayLengths["as"] != 2 || h.ArrayLengths["af"] != 3 || h.ArrayLengths["au"] != 2 {
		t.Errorf("array lengths = %v", h.ArrayLengths)
	}
	if h.ContextLength != 123 || h.TensorCount != 1 {
		t.Errorf("header = %+v", h)
	}
	if buf.Len()%gguf.Alignment != 0 {
		t.Errorf("file length %d is not aligned", buf.Len())
	}
}

func TestRefusesNonGGUF(t *testing.T) {
	dir := t.TempDir()
	text := filepath.Join(dir, "notes.gguf")
	if err := os.WriteFile(text, []byte("these are my notes, not a model\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := gguf.ReadFile(text)
	if !errors.Is(err, gguf.ErrNotGGUF) || !strings.Contains(err.Error(), "notes.gguf") {
		t.Fatalf("text file: err = %v", err)
	}
	empty := filepath.Join(dir, "empty.gguf")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := gguf.ReadFile(empty); !errors.Is(err, gguf.ErrNotGGUF) {
		t.Fatalf("empty file: err = %v", err)
	}
	if _, err := gguf.ReadFile(dir); err == nil || !strings.Contains(err.Error(), "directory") {
		t.Fatalf("directory: err = %v", err)
	}
	if _, err := gguf.ReadFile(filepath.Join(dir, "missing.gguf")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing: err = %v", err)
	}
}

// Every prefix of a valid header must be refused as truncated, never panic.
func TestRefusesEveryTruncation(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tiny.gguf")
	if err := gguftest.WriteLlama(path, gguftest.Options{Layers: 1}); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// The header (metadata + tensor infos) is the first few KiB.
	full, err := gguf.Read(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	_ = full
	// Cut anywhere, header or tensor data: refused as truncated.
	for n := 4; n < len(data); n += 1 + n/50 {
		_, err := gguf.Read(bytes.NewReader(data[:n]), int64(n))
		if !errors.Is(err, gguf.ErrTruncated) {
			t.Fatalf("prefix %d of %d: err = %v, want ErrTruncated", n, len(data), err)
		}
	}
}

func TestRefusesHostileLengths(t *testing.T) {
	var buf bytes.Buffer
	buf.WriteString("GGUF")
	buf.Write([]byte{3, 0, 0, 0})
	buf.Write([]byte{0, 0, 0, 0, 0, 0, 0, 0}) // tensors
	buf.Write([]byte{1, 0, 0, 0, 0, 0, 0, 0}) // kvs
	// key length 2^60
	buf.Write([]byte{0, 0, 0, 0, 0, 0, 0, 0x10})
	if _, err := gguf.Read(bytes.NewReader(buf.Bytes()), int64(buf.Len())); err == nil {
		t.Fatal("a 2^60-byte key was accepted")
	}
	var v1 bytes.Buffer
	v1.WriteString("GGUF")
	v1.Write([]byte{1, 0, 0, 0})
	if _, err := gguf.Read(bytes.NewReader(v1.Bytes()), int64(v1.Len())); err == nil || !strings.Contains(err.Error(), "version 1") {
		t.Fatalf("version 1: err = %v", err)
	}
}

func FuzzRead(f *testing.F) {
	var buf bytes.Buffer
	_ = gguf.Write(&buf, []gguf.KV{{Key: "general.architecture", Value: "llama"}, {Key: "a", Value: []string{"x"}}}, nil)
	f.Add(buf.Bytes())
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = gguf.Read(bytes.NewReader(b), int64(len(b)))
	})
}
