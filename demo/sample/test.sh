#!/bin/sh
# Tests for greet.sh: run with `sh test.sh`.
fail() { echo "FAIL: $*"; exit 1; }
out=$(sh greet.sh)
[ "$out" = "Hello, world!" ] || fail "no argument: got '$out', want 'Hello, world!'"
out=$(sh greet.sh Ada)
[ "$out" = "Hello, Ada!" ] || fail "greet.sh Ada: got '$out', want 'Hello, Ada!'"
echo "PASS"
