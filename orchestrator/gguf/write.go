package gguf

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"math"
)

// Alignment is the default alignment of tensor data (general.alignment).
const Alignment = 32

// KV is one metadata entry to write. Value may be uint8, int8, uint16,
// int16, uint32, int32, uint64, int64, float32, float64, bool, string,
// []string, []float32, []int32 or []uint32.
type KV struct {
	Key   string
	Value any
}

// Tensor is one F32 tensor to write. Dims lists sizes fastest-varying
// first (ggml's ne[0], ne[1], ...); len(Data) must be their product.
type Tensor struct {
	Name string
	Dims []uint64
	Data []float32
}

// ggmlTypeF32 is ggml's type id of 32-bit float tensors.
const ggmlTypeF32 = 0

// Write encodes a GGUF version 3 file holding kvs and tensors to w.
func Write(w io.Writer, kvs []KV, tensors []Tensor) error {
	bw := bufio.NewWriter(w)
	e := &encoder{w: bw}
	e.raw([]byte(Magic))
	e.u32(3)
	e.u64(uint64(len(tensors)))
	e.u64(uint64(len(kvs)))
	for _, kv := range kvs {
		e.str(kv.Key)
		if err := e.value(kv.Value); err != nil {
			return fmt.Errorf("gguf: metadata %q: %w", kv.Key, err)
		}
	}
	var offset uint64
	for _, t := range tensors {
		n := uint64(1)
		for _, d := range t.Dims {
			n *= d
		}
		if n != uint64(len(t.Data)) {
			return fmt.Errorf("gguf: tensor %q: dims %v hold %d values, data has %d", t.Name, t.Dims, n, len(t.Data))
		}
		e.str(t.Name)
		e.u32(uint32(len(t.Dims)))
		for _, d := range t.Dims {
			e.u64(d)
		}
		e.u32(ggmlTypeF32)
		e.u64(offset)
		offset += align(n * 4)
	}
	e.pad()
	for _, t := range tensors {
		for _, f := range t.Data {
			e.u32(math.Float32bits(f))
		}
		e.pad()
	}
	if e.err != nil {
		return fmt.Errorf("gguf: writing: %w", e.err)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("gguf: writing: %w", err)
	}
	return nil
}

func align(n uint64) uint64 { return (n + Alignment - 1) / Alignment * Alignment }

type encoder struct {
	w   *bufio.Writer
	n   uint64
	err error
}

func (e *encoder) raw(b []byte) {
	if e.err != nil {
		return
	}
	var m int
	m, e.err = e.w.Write(b)
	e.n += uint64(m)
}

func (e *encoder) u32(v uint32) { e.raw(binary.LittleEndian.AppendUint32(nil, v)) }
func (e *encoder) u64(v uint64) { e.raw(binary.LittleEndian.AppendUint64(nil, v)) }
func (e *encoder) str(s string) { e.u64(uint64(len(s))); e.raw([]byte(s)) }
func (e *encoder) pad()         { e.raw(make([]byte, align(e.n)-e.n)) }

func (e *encoder) value(v any) error {
	le := binary.LittleEndian
	switch x := v.(type) {
	case uint8:
		e.u32(uint32(TypeUint8))
		e.raw([]byte{x})
	case int8:
		e.u32(uint32(TypeInt8))
		e.raw([]byte{byte(x)})
	case uint16:
		e.u32(uint32(TypeUint16))
		e.raw(le.AppendUint16(nil, x))
	case int16:
		e.u32(uint32(TypeInt16))
		e.raw(le.AppendUint16(nil, uint16(x)))
	case uint32:
		e.u32(uint32(TypeUint32))
		e.u32(x)
	case int32:
		e.u32(uint32(TypeInt32))
		e.u32(uint32(x))
	case uint64:
		e.u32(uint32(TypeUint64))
		e.u64(x)
	case int64:
		e.u32(uint32(TypeInt64))
		e.u64(uint64(x))
	case float32:
		e.u32(uint32(TypeFloat32))
		e.u32(math.Float32bits(x))
	case float64:
		e.u32(uint32(TypeFloat64))
		e.u64(math.Float64bits(x))
	case bool:
		e.u32(uint32(TypeBool))
		b := byte(0)
		if x {
			b = 1
		}
		e.raw([]byte{b})
	case string:
		e.u32(uint32(TypeString))
		e.str(x)
	case []string:
		e.u32(uint32(TypeArray))
		e.u32(uint32(TypeString))
		e.u64(uint64(len(x)))
		for _, s := range x {
			e.str(s)
		}
	case []float32:
		e.u32(uint32(TypeArray))
		e.u32(uint32(TypeFloat32))
		e.u64(uint64(len(x)))
		for _, f := range x {
			e.u32(math.Float32bits(f))
		}
	case []int32:
		e.u32(uint32(TypeArray))
		e.u32(uint32(TypeInt32))
		e.u64(uint64(len(x)))
		for _, i := range x {
			e.u32(uint32(i))
		}
	case []uint32:
		e.u32(uint32(TypeArray))
		e.u32(uint32(TypeUint32))
		e.u64(uint64(len(x)))
		for _, i := range x {
			e.u32(i)
		}
	default:
		return fmt.Errorf("unsupported value type %T", v)
	}
	return nil
}
