package gguftest

import (
	"os"
	"testing"
)

// TestWriteModelFile writes a model where $GGUFTEST_OUT says (a manual aid).
func TestWriteModelFile(t *testing.T) {
	out := os.Getenv("GGUFTEST_OUT")
	if out == "" {
		t.Skip("GGUFTEST_OUT not set")
	}
	if err := WriteLlama(out, Options{NeverEOS: os.Getenv("GGUFTEST_NEVER_EOS") != ""}); err != nil {
		t.Fatal(err)
	}
}
