// Package hostfs is the one implementation of the host-side file steps on
// a tree a sandbox can write (a workspace, a task or sub-agent worktree,
// an environment export): handing it to the sandbox user (ChownTree,
// LchownChain), measuring it (MeasureTree) and removing it (RemoveTree).
//
// Every function walks by open directory descriptors (openat with
// O_NOFOLLOW, *at calls with AT_SYMLINK_NOFOLLOW), never by path, so a
// symlink planted anywhere in the tree is acted on as the link itself or
// refused, never followed to a host file; and every walk is bounded in
// depth (MaxTreeDepth) and entries (MaxTreeEntries). The sandbox package
// (handing a workspace over at create) and the orchestrator (worktrees,
// sub-agents, environment builds, the disk bound) both use it. It is only
// safe while no process of a sandbox that can write the tree can run: see
// the orchestrator's freeze.
package hostfs
