// Package worktree runs host-side git for tasks: it opens the user's
// repository, resolves the base of a task, creates the task's branch and
// worktree under the state directory, commits the agent's work, summarises
// it (log, diffstat, diff) and merges or removes it.
//
// Everything the sandbox can write is hostile to host git. The worktree
// directory is bind-mounted into the sandbox, so a `.git` file or directory,
// a `.gitattributes` or a config the agent writes there must never be able to
// make git run a program on the host. The rules that guarantee it:
//
//   - every git run goes through one function (git.run) that adds the
//     hardening below and scrubs the environment.
//   - git always runs with an explicit --git-dir and --work-tree; it never
//     discovers a repository (the one exception is Open, in the user's own
//     checkout), so a `.git` in the worktree is just a file in the tree
//     (git never adds a path named .git).
//   - the worktree's real admin directory stays in the user's repository,
//     outside the mount, and the worktree's own `.git` pointer file is
//     deleted right after creation (the worktree is locked so that git's
//     prune never mistakes it for a stale one).
//   - hooks, fsmonitor, external diff, textconv, signing, submodule recursion,
//     credential helpers and every transport are switched off on the command
//     line; the system config and system attributes are ignored; the
//     environment is scrubbed of every GIT_* variable.
//
// Filter, diff and merge drivers are selected by attributes (which the agent
// can write) but defined only in config, which the agent cannot reach.
// Still, the agent could pick one of the user's own drivers for its files,
// so every git run in a task worktree switches off all configured filters
// (the worktree holds exactly the committed bytes), and diffs never run
// textconv or external programs. The user's merge drivers run only when
// the user merges a task after reviewing it.
//
// A merge changes nothing until its checks pass (no uncommitted change, and
// no untracked or ignored file, where it writes), hands its plan to the
// caller's journal, updates the user's checkout and only then moves the
// branch; RecoverMerge finishes or undoes a merge killed in between.
//
// This package must never run git without the hardening above, never run git
// with a working directory inside a worktree (git apply is the one
// exception, with --git-dir still explicit), and never open worktree files
// itself (it only hands paths to git).
package worktree
