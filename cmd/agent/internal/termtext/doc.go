// Package termtext makes text from the model, the sandbox or the repository
// safe to show on a terminal or in a form. It is the one place that decides
// how such text is displayed: every command that prints a prompt, a model
// reply, a command's output, a file name, a commit subject or a branch
// passes it through Line, Text, Path or a Writer first.
//
// What it guarantees: no byte it returns can start a terminal control
// sequence or move the cursor. C0 controls (except newline and tab in
// Text), DEL, C1 controls (U+0080-U+009F, which some terminals take as
// 8-bit CSI/OSC), Unicode bidirectional overrides and invalid UTF-8 are
// replaced by a visible escape: `\x1b`, `\u202e`. Paths are quoted the way
// git quotes them (core.quotePath): names holding a control, a quote, a
// backslash or an unprintable character are shown in double quotes with
// C-style escapes, so a file name holding a newline cannot forge a line.
//
// It must never be bypassed for untrusted text, and its output is meant
// for display only (the escapes are not reversible where the input itself
// held a backslash).
package termtext
