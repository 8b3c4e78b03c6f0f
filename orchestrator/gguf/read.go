package gguf

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
)

// Magic is the first four bytes of every GGUF file.
const Magic = "GGUF"

// ErrNotGGUF means the file does not start with the GGUF magic.
var ErrNotGGUF = errors.New("not a GGUF model file")

// ErrTruncated means the file ends inside its header.
var ErrTruncated = errors.New("truncated GGUF file")

// ValueType is the type tag of a metadata value.
type ValueType uint32

// Metadata value types, as the GGUF specification numbers them.
const (
	TypeUint8   ValueType = 0
	TypeInt8    ValueType = 1
	TypeUint16  ValueType = 2
	TypeInt16   ValueType = 3
	TypeUint32  ValueType = 4
	TypeInt32   ValueType = 5
	TypeFloat32 ValueType = 6
	TypeBool    ValueType = 7
	TypeString  ValueType = 8
	TypeArray   ValueType = 9
	TypeUint64  ValueType = 10
	TypeInt64   ValueType = 11
	TypeFloat64 ValueType = 12
)

// fixedSize is the encoded size of scalar types; 0 for string and array.
func (t ValueType) fixedSize() int64 {
	switch t {
	case TypeUint8, TypeInt8, TypeBool:
		return 1
	case TypeUint16, TypeInt16:
		return 2
	case TypeUint32, TypeInt32, TypeFloat32:
		return 4
	case TypeUint64, TypeInt64, TypeFloat64:
		return 8
	}
	return 0
}

// Header is what a GGUF file says about itself before its tensor data.
type Header struct {
	// Path and Size describe the file read (Size in bytes).
	Path string `json:"path"`
	Size int64  `json:"size"`
	// Version is the GGUF format version (1-3 exist; llama.cpp reads 2 and 3).
	Version     uint32 `json:"version"`
	TensorCount uint64 `json:"tensor_count"`
	KVCount     uint64 `json:"kv_count"`
	// Architecture is general.architecture ("llama", "qwen3", ...).
	Architecture string `json:"architecture"`
	// Name is general.name, when set.
	Name string `json:"name,omitempty"`
	// ContextLength is <arch>.context_length: the context the model was
	// trained with; 0 when the file does not say.
	ContextLength uint64 `json:"context_length,omitempty"`
	// Metadata holds every scalar and string value, keyed by name. Arrays
	// are recorded by length only, in ArrayLengths (vocabularies are big).
	Metadata     map[string]any    `json:"-"`
	ArrayLengths map[string]uint64 `json:"-"`
}

// limits against hostile headers: a real model has a few hundred keys and
// at most tens of thousands of tensors; strings are short except chat
// templates (tens of KiB).
const (
	maxKVCount     = 1 << 20
	maxTensorCount = 1 << 24
	maxStringLen   = 16 << 20
)

// ReadFile reads the header of the GGUF file at path.
func ReadFile(path string) (*Header, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("opening model: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("opening model: %w", err)
	}
	if st.IsDir() {
		return nil, fmt.Errorf("model %s is a directory, not a .gguf file", path)
	}
	h, err := Read(f, st.Size())
	if err != nil {
		return nil, fmt.Errorf("model %s: %w", path, err)
	}
	h.Path = path
	return h, nil
}

// Read parses a GGUF header from r, whose total length is size bytes.
// Tensor infos are walked (to prove the header is complete) but not kept.
func Read(r io.Reader, size int64) (*Header, error) {
	d := &decoder{r: bufio.NewReaderSize(r, 64<<10), left: size}
	magic, err := d.bytes(4)
	if err != nil {
		if errors.Is(err, ErrTruncated) {
			return nil, fmt.Errorf("%w (the file is %d bytes, shorter than the GGUF magic)", ErrNotGGUF, size)
		}
		return nil, err
	}
	if string(magic) != Magic {
		return nil, fmt.Errorf("%w: it starts with %q, not %q", ErrNotGGUF, printable(magic), Magic)
	}
	h := &Header{Size: size, Metadata: map[string]any{}, ArrayLengths: map[string]uint64{}}
	if h.Version, err = d.u32(); err != nil {
		return nil, err
	}
	if h.Version < 2 || h.Version > 3 {
		return nil, fmt.Errorf("unsupported GGUF version %d (llama-server reads versions 2 and 3)", h.Version)
	}
	if h.TensorCount, err = d.u64(); err != nil {
		return nil, err
	}
	if h.KVCount, err = d.u64(); err != nil {
		return nil, err
	}
	if h.KVCount > maxKVCount || h.TensorCount > maxTensorCount {
		return nil, fmt.Errorf("implausible GGUF header: %d metadata keys, %d tensors", h.KVCount, h.TensorCount)
	}
	for i := uint64(0); i < h.KVCount; i++ {
		key, err := d.str()
		if err != nil {
			return nil, fmt.Errorf("metadata key %d: %w", i, err)
		}
		t, err := d.u32()
		if err != nil {
			return nil, fmt.Errorf("metadata %q: %w", key, err)
		}
		if ValueType(t) == TypeArray {
			n, err := d.skipArray()
			if err != nil {
				return nil, fmt.Errorf("metadata %q: %w", key, err)
			}
			h.ArrayLengths[key] = n
			continue
		}
		v, err := d.value(ValueType(t))
		if err != nil {
			return nil, fmt.Errorf("metadata %q: %w", key, err)
		}
		h.Metadata[key] = v
	}
	var tensors []tensorInfo
	for i := uint64(0); i < h.TensorCount; i++ {
		ti, err := d.tensorInfo()
		if err != nil {
			return nil, fmt.Errorf("tensor info %d: %w", i, err)
		}
		tensors = append(tensors, ti)
	}
	if err := checkTensorData(h, tensors, size-d.left); err != nil {
		return nil, err
	}
	h.Architecture, _ = h.Metadata["general.architecture"].(string)
	if h.Architecture == "" {
		return nil, errors.New("GGUF file has no general.architecture: it is not a model llama-server can load")
	}
	h.Name, _ = h.Metadata["general.name"].(string)
	h.ContextLength, _ = asUint(h.Metadata[h.Architecture+".context_length"])
	return h, nil
}

// Uint returns the metadata value key as an unsigned integer, if it is one.
func (h *Header) Uint(key string) (uint64, bool) { return asUint(h.Metadata[key]) }

func asUint(v any) (uint64, bool) {
	switch x := v.(type) {
	case uint8:
		return uint64(x), true
	case uint16:
		return uint64(x), true
	case uint32:
		return uint64(x), true
	case uint64:
		return x, true
	case int8:
		return uint64(max(x, 0)), x >= 0
	case int16:
		return uint64(max(x, 0)), x >= 0
	case int32:
		return uint64(max(x, 0)), x >= 0
	case int64:
		return uint64(max(x, 0)), x >= 0
	}
	return 0, false
}

func printable(b []byte) string {
	out := make([]byte, len(b))
	for i, c := range b {
		if c < 0x20 || c > 0x7e {
			c = '?'
		}
		out[i] = c
	}
	return string(out)
}

// decoder reads little-endian GGUF fields and tracks how many bytes remain
// so that no length taken from the file can exceed what the file holds.
type decoder struct {
	r    *bufio.Reader
	left int64
}

func (d *decoder) need(n int64) error {
	if n < 0 || n > d.left {
		return ErrTruncated
	}
	return nil
}

func (d *decoder) bytes(n int64) ([]byte, error) {
	if err := d.need(n); err != nil {
		return nil, err
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(d.r, b); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, ErrTruncated
		}
		return nil, fmt.Errorf("reading GGUF header: %w", err)
	}
	d.left -= n
	return b, nil
}

func (d *decoder) skip(n int64) error {
	if err := d.need(n); err != nil {
		return err
	}
	m, err := d.r.Discard(int(n))
	d.left -= int64(m)
	if err != nil {
		if errors.Is(err, io.EOF) {
			return ErrTruncated
		}
		return fmt.Errorf("reading GGUF header: %w", err)
	}
	return nil
}

func (d *decoder) u32() (uint32, error) {
	b, err := d.bytes(4)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint32(b), nil
}

func (d *decoder) u64() (uint64, error) {
	b, err := d.bytes(8)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(b), nil
}

func (d *decoder) strLen() (int64, error) {
	n, err := d.u64()
	if err != nil {
		return 0, err
	}
	if n > maxStringLen {
		return 0, fmt.Errorf("string of %d bytes is implausibly long", n)
	}
	return int64(n), nil
}

func (d *decoder) str() (string, error) {
	n, err := d.strLen()
	if err != nil {
		return "", err
	}
	b, err := d.bytes(n)
	return string(b), err
}

func (d *decoder) value(t ValueType) (any, error) {
	if t == TypeString {
		return d.str()
	}
	n := t.fixedSize()
	if n == 0 {
		return nil, fmt.Errorf("unknown value type %d", t)
	}
	b, err := d.bytes(n)
	if err != nil {
		return nil, err
	}
	le := binary.LittleEndian
	switch t {
	case TypeUint8:
		return b[0], nil
	case TypeInt8:
		return int8(b[0]), nil
	case TypeBool:
		return b[0] != 0, nil
	case TypeUint16:
		return le.Uint16(b), nil
	case TypeInt16:
		return int16(le.Uint16(b)), nil
	case TypeUint32:
		return le.Uint32(b), nil
	case TypeInt32:
		return int32(le.Uint32(b)), nil
	case TypeFloat32:
		return math.Float32frombits(le.Uint32(b)), nil
	case TypeUint64:
		return le.Uint64(b), nil
	case TypeInt64:
		return int64(le.Uint64(b)), nil
	default: // TypeFloat64
		return math.Float64frombits(le.Uint64(b)), nil
	}
}

// skipArray walks an array value and returns its length.
func (d *decoder) skipArray() (uint64, error) {
	et, err := d.u32()
	if err != nil {
		return 0, err
	}
	n, err := d.u64()
	if err != nil {
		return 0, err
	}
	t := ValueType(et)
	switch {
	case t == TypeString:
		for i := uint64(0); i < n; i++ {
			l, err := d.strLen()
			if err != nil {
				return 0, err
			}
			if err := d.skip(l); err != nil {
				return 0, err
			}
		}
	case t.fixedSize() > 0:
		if n > uint64(d.left)/uint64(t.fixedSize()) {
			return 0, ErrTruncated
		}
		if err := d.skip(int64(n) * t.fixedSize()); err != nil {
			return 0, err
		}
	default:
		// Nested arrays exist in the format but no model uses them.
		return 0, fmt.Errorf("unsupported array element type %d", et)
	}
	return n, nil
}

type tensorInfo struct {
	name   string
	dims   []uint64
	typ    uint32
	offset uint64
}

func (d *decoder) tensorInfo() (tensorInfo, error) {
	var ti tensorInfo
	var err error
	if ti.name, err = d.str(); err != nil {
		return ti, err
	}
	n, err := d.u32()
	if err != nil {
		return ti, err
	}
	if n > 8 {
		return ti, fmt.Errorf("tensor %q with %d dimensions", ti.name, n)
	}
	for i := uint32(0); i < n; i++ {
		v, err := d.u64()
		if err != nil {
			return ti, err
		}
		ti.dims = append(ti.dims, v)
	}
	if ti.typ, err = d.u32(); err != nil {
		return ti, err
	}
	ti.offset, err = d.u64()
	return ti, err
}

// blockSizes are ggml's tensor types as (bytes per block, values per
// block), from ggml's type traits. Types missing here are not checked.
var blockSizes = map[uint32][2]uint64{
	0: {4, 1}, 1: {2, 1}, 2: {18, 32}, 3: {20, 32}, 6: {22, 32}, 7: {24, 32}, 8: {34, 32}, 9: {36, 32},
	10: {84, 256}, 11: {110, 256}, 12: {144, 256}, 13: {176, 256}, 14: {210, 256}, 15: {292, 256},
	16: {66, 256}, 17: {74, 256}, 18: {98, 256}, 19: {50, 256}, 20: {18, 32}, 21: {110, 256},
	22: {82, 256}, 23: {136, 256}, 24: {1, 1}, 25: {2, 1}, 26: {4, 1}, 27: {8, 1}, 28: {8, 1},
	29: {56, 256}, 30: {2, 1}, 39: {17, 32},
}

// checkTensorData verifies that every tensor's data lies inside the file.
// A download cut short keeps its header and loses tensor data; this is
// the check that catches it before llama-server is started.
func checkTensorData(h *Header, tensors []tensorInfo, headerEnd int64) error {
	align := uint64(Alignment)
	if a, ok := h.Uint("general.alignment"); ok && a > 0 && a <= 1<<16 {
		align = a
	}
	start := (uint64(headerEnd) + align - 1) / align * align
	if start > uint64(h.Size) {
		if len(tensors) == 0 {
			return nil
		}
		return fmt.Errorf("%w: the file ends before its tensor data", ErrTruncated)
	}
	avail := uint64(h.Size) - start
	for _, t := range tensors {
		bs, ok := blockSizes[t.typ]
		if !ok {
			continue
		}
		n := uint64(1)
		for _, d := range t.dims {
			if d != 0 && n > math.MaxUint64/d {
				return fmt.Errorf("tensor %q has implausible dimensions %v", t.name, t.dims)
			}
			n *= d
		}
		bytes := n / bs[1] * bs[0]
		if t.offset > avail || bytes > avail-t.offset {
			return fmt.Errorf("%w: tensor %q ends %d bytes past the end of the file", ErrTruncated, t.name, t.offset+bytes-avail)
		}
	}
	return nil
}
