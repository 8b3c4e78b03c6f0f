// Package verdict decides what a test run says: passed, failed, exit code
// masked, or unknown. It is pure logic over a command line, its exit code
// and the tail of its output, so the review and the merge gate rest on
// rules that can be read and tested, not on the exit code alone: a model
// that pipes a failing `go test` into `tail`, or appends `|| true`, gets
// an exit code of 0 that says nothing about the tests.
//
// It must never run anything or read files.
package verdict
