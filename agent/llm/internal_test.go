package llm

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestUnquoteBytes(t *testing.T) {
	tests := []struct {
		in   string
		want []byte
	}{
		{`""`, []byte{}},
		{`"plain"`, []byte("plain")},
		{`"a\nb\t\"c\"\\\/"`, []byte("a\nb\t\"c\"\\/")},
		{`"\u00e9\u65e5"`, []byte("é日")},
		{`"\ud83d\ude80"`, []byte("🚀")},
		{`"\ud83d x"`, []byte("\uFFFD x")}, // lone surrogate
		{"\"caf\xc3\"", []byte("caf\xc3")}, // half a character survives
		{"\"\xa9 ok\"", []byte("\xa9 ok")},
	}
	for _, tt := range tests {
		got, err := unquoteBytes([]byte(tt.in))
		if err != nil || !bytes.Equal(got, tt.want) {
			t.Errorf("unquoteBytes(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
	for _, bad := range []string{`"`, `"\x"`, `"\u12"`, `abc`} {
		if _, err := unquoteBytes([]byte(bad)); err == nil {
			t.Errorf("unquoteBytes(%q) did not fail", bad)
		}
	}
}

func TestRawTextKeepsObjects(t *testing.T) {
	var v struct {
		A rawText `json:"a"`
		B rawText `json:"b"`
		C rawText `json:"c"`
	}
	if err := json.Unmarshal([]byte(`{"a":{"x": 1},"b":null,"c":"s"}`), &v); err != nil {
		t.Fatal(err)
	}
	if string(v.A) != `{"x": 1}` || v.B != nil || string(v.C) != "s" {
		t.Errorf("%q %q %q", v.A, v.B, v.C)
	}
}

func TestCompletePrefix(t *testing.T) {
	rocket := []byte("🚀")
	tests := []struct {
		in   []byte
		want int
	}{
		{[]byte("abc"), 3},
		{[]byte("é"), 2},
		{[]byte("é")[:1], 0},
		{append([]byte("a"), rocket[:3]...), 1},
		{append([]byte("a"), rocket[:1]...), 1},
		{rocket, 4},
		{[]byte{0xff}, 1},      // invalid: not held
		{[]byte{'a', 0x80}, 2}, // stray continuation: not held
		{[]byte{}, 0},
	}
	for _, tt := range tests {
		if got := completePrefix(tt.in); got != tt.want {
			t.Errorf("completePrefix(%q) = %d, want %d", tt.in, got, tt.want)
		}
	}
}

func TestTextBufAnySplit(t *testing.T) {
	s := []byte("aé日🚀z")
	for cut1 := 0; cut1 <= len(s); cut1++ {
		for cut2 := cut1; cut2 <= len(s); cut2++ {
			var b textBuf
			out := b.add(s[:cut1]) + b.add(s[cut1:cut2]) + b.add(s[cut2:])
			for _, part := range []string{b.add(nil)} {
				out += part
			}
			out += b.flush()
			if out != string(s) {
				t.Fatalf("cuts %d,%d: %q", cut1, cut2, out)
			}
		}
	}
}

func TestSSEReader(t *testing.T) {
	in := ": comment\n\nevent: x\ndata: a\ndata:b\nid: 7\nretry: 10\n\n" +
		"data: {\"k\":1}\r\n\r\n" + "error: {\"message\":\"m\"}\n\n" + "data: tail-without-blank-line"
	r := newSSEReader(strings.NewReader(in))
	want := []sseEvent{
		{Event: "x", Data: []byte("a\nb")},
		{Data: []byte(`{"k":1}`)},
		{Event: "error", Data: []byte(`{"message":"m"}`)},
		{Data: []byte("tail-without-blank-line"), Cut: true},
	}
	for i, w := range want {
		ev, err := r.Next()
		if err != nil || ev.Event != w.Event || !bytes.Equal(ev.Data, w.Data) || ev.Cut != w.Cut {
			t.Fatalf("event %d: %+v %v, want %+v", i, ev, err, w)
		}
	}
	if _, err := r.Next(); !errors.Is(err, io.EOF) {
		t.Fatalf("end: %v", err)
	}
}

func TestSSEReaderLongLine(t *testing.T) {
	long := strings.Repeat("x", 1<<20)
	r := newSSEReader(strings.NewReader("data: " + long + "\n\n"))
	ev, err := r.Next()
	if err != nil || len(ev.Data) != len(long) {
		t.Fatalf("%d %v", len(ev.Data), err)
	}
}

func TestErrorMessages(t *testing.T) {
	e := &Error{Kind: KindUnavailable, StatusCode: 503, Message: "Loading model"}
	if got := e.Error(); got != "LLM server unavailable (HTTP 503): Loading model" {
		t.Errorf("%q", got)
	}
	if !errors.Is(e, ErrUnavailable) || errors.Is(e, ErrServer) || !e.Retriable() {
		t.Error("classification")
	}
	for _, k := range []ErrorKind{KindUnavailable, KindTimeout, KindServer, KindContextExceeded, KindToolsUnsupported, KindEmptyStream, KindProtocol} {
		if kindSentinel[k] == nil || !utf8.ValidString((&Error{Kind: k}).Error()) {
			t.Errorf("kind %d has no sentinel", k)
		}
	}
}

func FuzzAssembler(f *testing.F) {
	f.Add([]byte(`{"choices":[{"index":0,"delta":{"content":"hi","tool_calls":[{"index":0,"id":"a","function":{"name":"x","arguments":"{"}}]}}]}`))
	f.Add([]byte(`{"error":"boom"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		a := newAssembler(1<<20, nil)
		_ = a.add(data)
		_ = a.add(data)
		r := a.response()
		if !utf8.ValidString(r.Message.Content) {
			t.Fatal("invalid UTF-8 in content")
		}
	})
}
