package cli

import (
	"bytes"
	"strings"
	"testing"
)

// On a terminal, output goes through the pager; --no-pager, a pipe or
// TERM=dumb do not page.
func TestPager(t *testing.T) {
	var out bytes.Buffer
	ios := &IOStreams{Out: &out, ErrOut: &bytes.Buffer{}, OutTTY: true, Pager: "tr a-z A-Z"}
	if err := ios.StartPager(); err != nil {
		t.Fatal(err)
	}
	_, _ = ios.Out.Write([]byte("paged text\n"))
	ios.StopPager()
	if got := out.String(); got != "PAGED TEXT\n" {
		t.Errorf("through the pager: %q", got)
	}
	if ios.Out != &out {
		t.Error("Out not restored after the pager")
	}
	for name, s := range map[string]*IOStreams{
		"pipe":      {Out: &out, OutTTY: false, Pager: "tr a-z A-Z"},
		"TERM=dumb": {Out: &out, OutTTY: true, Dumb: true, Pager: "tr a-z A-Z"},
		"cat":       {Out: &out, OutTTY: true, Pager: "cat"},
	} {
		out.Reset()
		if err := s.StartPager(); err != nil {
			t.Fatal(err)
		}
		_, _ = s.Out.Write([]byte("plain\n"))
		s.StopPager()
		if !strings.Contains(out.String(), "plain") {
			t.Errorf("%s: paged: %q", name, out.String())
		}
	}
}
