package verdict

import "testing"

func code(n int) *int { return &n }

func TestJudge(t *testing.T) {
	for _, c := range []struct {
		name, cmd string
		exit      *int
		out       string
		want      Status
	}{
		{"go test passes", "go test ./...", code(0), "ok  \tex.com/m\t0.01s\n", Passed},
		{"go test fails", "go test ./...", code(1), "--- FAIL: TestX (0.00s)\nFAIL\n", Failed},
		// Behind a pipe without pipefail the exit code is tail's: the
		// runner's own summary overrides it.
		{"go test | tail", "go test ./... 2>&1 | tail -5", code(0), "    x_test.go:9: boom\nFAIL\nFAIL\tex.com/m\t0.01s\nFAIL\n", Failed},
		{"go test -v | grep", "go test -v ./... | grep -- '---'", code(0), "--- FAIL: TestX (0.00s)\n--- PASS: TestY (0.00s)\n", Failed},
		{"pytest failed", "pytest -q | tail -3", code(0), "F.\n1 failed, 1 passed in 0.05s\n", Failed},
		{"pytest summary line", "python -m pytest", code(0), "==== 2 failed, 10 passed, 1 warning in 1.20s ====\n", Failed},
		{"pytest collection", "pytest | tail", code(0), "ERROR tests/test_a.py\n!!!!!!! Interrupted: 1 error during collection !!!!!!!\n", Failed},
		{"pytest passes", "pytest", code(0), "===== 12 passed in 0.30s =====\n", Passed},
		{"unittest", "python -m unittest | cat", code(0), "FAILED (failures=1)\n", Failed},
		{"cargo", "cargo test 2>&1 | tail -3", code(0), "test result: FAILED. 3 passed; 1 failed; 0 ignored\n", Failed},
		{"cargo passes", "cargo test", code(0), "test result: ok. 4 passed; 0 failed; 0 ignored\n", Passed},
		{"make", "make test | tail -2", code(0), "make: *** [Makefile:12: test] Error 1\n", Failed},
		{"make sub", "make check", code(0), "make[1]: *** [Makefile:3: all] Error 2\n", Failed},
		{"jest", "npx jest | tail", code(0), "Tests:       1 failed, 4 passed, 5 total\n", Failed},
		{"jest suites", "npm test | tail", code(0), "Test Suites: 1 failed, 2 passed, 3 total\n", Failed},
		{"jest passes", "npm test", code(0), "Test Suites: 3 passed, 3 total\nTests:       5 passed, 5 total\n", Passed},
		{"npm", "npm test | tail", code(0), "npm ERR! Test failed.  See above for more details.\n", Failed},
		{"mocha", "npx mocha | tail", code(0), "  3 passing (10ms)\n  1 failing\n", Failed},
		{"ctest", "ctest | tail -3", code(0), "75% tests passed, 1 tests failed out of 4\n", Failed},
		{"ctest passes", "ctest", code(0), "100% tests passed, 0 tests failed out of 4\n", Passed},
		{"rspec", "bundle exec rspec | tail", code(0), "5 examples, 2 failures\n", Failed},
		{"rspec passes", "rspec", code(0), "5 examples, 0 failures\n", Passed},
		{"tap", "bats test | cat", code(0), "1..2\nok 1 a\nnot ok 2 b\n", Failed},
		{"maven", "mvn test | tail", code(0), "[INFO] BUILD FAILURE\n", Failed},
		// Masking.
		{"|| true", "sh test.sh || true", code(0), "FAIL? no summary here\n", Masked},
		{"|| :", "go test ./... || :", code(0), "", Masked},
		{"|| exit 0", "go test ./... || exit 0", code(0), "", Masked},
		{"; true", "go test ./...; true", code(0), "", Masked},
		{"; echo", "go test ./... ; echo done", code(0), "done\n", Masked},
		{"|| echo", "cargo test || echo tests failed", code(0), "tests failed\n", Masked},
		{"newline", "pytest\necho finished", code(0), "finished\n", Masked},
		{"subshell", "(cd sub && go test ./... || true)", code(0), "", Masked},
		{"background", "go test ./... &", code(0), "", Masked},
		{"negated", "! go test ./...", code(0), "", Masked},
		{"exit $rc", "go test ./...; rc=$?; exit $rc", code(0), "", Masked},
		// Not masking.
		{"&& echo", "go test ./... && echo ok", code(0), "ok\n", Passed},
		{"cd &&", "cd sub && go test ./...", code(0), "", Passed},
		{"|| exit 1", "go test ./... || exit 1", code(0), "", Passed},
		{"; exit $?", "go test ./...; exit $?", code(0), "", Passed},
		{"redirections", "go test ./... 2>&1 >log &>/dev/null |& tee x", code(0), "", Passed},
		{"quoted ops", `go test -run 'A||B' ./... && echo "a; b || true"`, code(0), "", Passed},
		{"comment", "go test ./... # || true", code(0), "", Passed},
		{"setup masked before test", "make deps || true; go test ./...", code(0), "", Passed},
		// A failure summary beats masking, and a non-zero exit beats all.
		{"masked but FAIL shown", "go test ./... || true", code(0), "FAIL\tex.com/m\n", Failed},
		{"non-zero", "sh test.sh || true", code(2), "", Failed},
		// No trustworthy run.
		{"cut short", "go test ./...", nil, "", Unknown},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := Judge(c.cmd, c.exit, c.out)
			if got.Status != c.want {
				t.Errorf("Judge(%q, %q) = %+v, want %s", c.cmd, c.out, got, c.want)
			}
			if got.Status != Passed && got.Status != Failed && got.Reason == "" {
				t.Errorf("%s without a reason", got.Status)
			}
			if got.Passed() != (c.want == Passed) {
				t.Errorf("Passed() = %v", got.Passed())
			}
		})
	}
}

// TestPassingOutputsHaveNoSummary: the outputs of passing runs of each
// runner match no failure rule (a rule that matched them would fail every
// project that uses the runner).
func TestPassingOutputsHaveNoSummary(t *testing.T) {
	for _, out := range []string{
		"ok  \tgithub.com/google/uuid\t0.012s\n",
		"PASS\nok  \tex.com/m\t0.01s\n",
		"=== RUN   TestFail\n--- PASS: TestFail (0.00s)\n",
		"============ 40 passed, 2 skipped in 3.21s ============\n",
		"Ran 12 tests in 0.004s\n\nOK\n",
		"test result: ok. 10 passed; 0 failed; 0 ignored; 0 measured\n",
		"make: Nothing to be done for 'test'.\n",
		"Tests:       12 passed, 12 total\n",
		"  7 passing (20ms)\n",
		"100% tests passed, 0 tests failed out of 3\n",
		"3 examples, 0 failures\n",
		"1..2\nok 1 a\nok 2 b\n",
		"[INFO] BUILD SUCCESS\n",
		"BUILD SUCCESSFUL in 2s\n",
		"Passed!  - Failed:     0, Passed:    12\n",
		"ok | 3 passed | 0 failed (20ms)\n",
		"TestFailureHandling ok\nfailures: none\n",
	} {
		if s := FailureSummary(out); s != "" {
			t.Errorf("passing output %q matched %q", out, s)
		}
	}
}

func TestIsTestCommand(t *testing.T) {
	for cmd, want := range map[string]bool{
		"go test ./...":              true,
		"cd x && pytest -q":          true,
		"make test":                  true,
		"make -j4 check":             true,
		"sh test.sh":                 true,
		"go build ./...":             false,
		"cat test.txt":               false,
		"! go test ./...":            true,
		"npm run test -- --coverage": true,
	} {
		if got := IsTestCommand(cmd); got != want {
			t.Errorf("IsTestCommand(%q) = %v", cmd, got)
		}
	}
}
