package cli

import (
	"errors"
	"fmt"
	"io"

	"github.com/charmbracelet/bubbles/key"
	"github.com/charmbracelet/huh"

	"github.com/localagent/agent/orchestrator"
)

// approveAsk is the --approve value that shows the form.
const approveAsk = "ask"

// parseApprove checks an --approve value.
func parseApprove(s string) (string, error) {
	if s == approveAsk {
		return s, nil
	}
	d, err := orchestrator.ParseDecision(s)
	if err != nil {
		return "", UsageErrorf("--approve %q: want ask, merge, squash, keep or discard", s)
	}
	return string(d), nil
}

// errNeedApprove is the answer when a decision is needed and nobody can be
// asked: never prompt without a terminal.
func errNeedApprove(what string) error {
	return UsageErrorf("%s needs a decision but stdin/stdout is not a terminal, so no form can be shown: pass --approve merge|squash|keep|discard", what)
}

// formKeyMap makes Esc abort the form like Ctrl-C does (both keep the branch).
func formKeyMap() *huh.KeyMap {
	km := huh.NewDefaultKeyMap()
	km.Quit = key.NewBinding(key.WithKeys("ctrl+c", "esc"), key.WithHelp("esc", "keep and quit"))
	return km
}

// newApprovalForm builds the decision form for a reviewed task. The choice
// lands in *choice, which starts at keep (the default). When discarding
// would lose work (unmerged commits, uncommitted files), choosing discard
// asks again in a second group of the same form; *sure says whether the
// user confirmed. (One form, not two in a row: a second bubbletea program
// on the same input could lose the keys the first one read ahead.)
func newApprovalForm(rv *orchestrator.Review, unmerged, uncommitted int, choice *orchestrator.Decision, sure *bool) *huh.Form {
	*choice = orchestrator.Keep
	*sure = false
	into := rv.BaseBranch
	var opts []huh.Option[orchestrator.Decision]
	if into != "" && rv.Unmerged > 0 {
		opts = append(opts,
			huh.NewOption(fmt.Sprintf("Merge into %s (a merge commit, --no-ff)", into), orchestrator.Merge),
			huh.NewOption(fmt.Sprintf("Squash-merge into %s (one commit)", into), orchestrator.Squash))
	}
	opts = append(opts,
		huh.NewOption(fmt.Sprintf("Keep branch %s for review", rv.Branch), orchestrator.Keep),
		huh.NewOption("Discard the branch and its worktree", orchestrator.Discard))
	desc := fmt.Sprintf("%d commit(s), %s", len(rv.Commits), rv.Stat.String())
	if rv.BaseMoved {
		desc += fmt.Sprintf("; %s has moved since the task started (merge is tried; a conflict changes nothing)", into)
	}
	mustConfirm := unmerged > 0 || uncommitted > 0
	return huh.NewForm(
		huh.NewGroup(
			huh.NewSelect[orchestrator.Decision]().
				Title(fmt.Sprintf("Task %s: what should happen to its branch?", rv.Task)).
				Description(desc).
				Options(opts...).
				Value(choice),
		),
		huh.NewGroup(discardConfirm(unmerged, uncommitted, sure)).
			WithHideFunc(func() bool { return *choice != orchestrator.Discard || !mustConfirm }),
	).WithKeyMap(formKeyMap()).WithShowHelp(true)
}

func discardConfirm(commits, uncommitted int, confirm *bool) *huh.Confirm {
	title := "Discard the task?"
	switch {
	case commits > 0 && uncommitted > 0:
		title = fmt.Sprintf("Discard %d unmerged commit(s) and %d uncommitted file(s)? They exist nowhere else.", commits, uncommitted)
	case commits > 0:
		title = fmt.Sprintf("Discard %d unmerged commit(s)? They exist nowhere else.", commits)
	case uncommitted > 0:
		title = fmt.Sprintf("Discard %d uncommitted file(s)? They exist nowhere else.", uncommitted)
	}
	return huh.NewConfirm().Title(title).Affirmative("Discard").Negative("Keep").Value(confirm)
}

// newDiscardConfirm builds the question `agent discard` asks before
// discarding work that exists nowhere else.
func newDiscardConfirm(commits int, uncommitted int, confirm *bool) *huh.Form {
	*confirm = false
	return huh.NewForm(huh.NewGroup(discardConfirm(commits, uncommitted, confirm))).WithKeyMap(formKeyMap())
}

// runForm runs a form on the given streams. Esc and Ctrl-C come back as
// ErrCancelled.
func runForm(f *huh.Form, in io.Reader, out io.Writer) error {
	err := f.WithInput(in).WithOutput(out).Run()
	if errors.Is(err, huh.ErrUserAborted) {
		return ErrCancelled
	}
	return err
}

// askDecision shows the approval form. Backing out (Esc, Ctrl-C), or
// declining the confirmation of a discard, keeps the branch.
func askDecision(ios *IOStreams, rv *orchestrator.Review, unmerged, uncommitted int) (orchestrator.Decision, error) {
	var choice orchestrator.Decision
	var sure bool
	if err := runForm(newApprovalForm(rv, unmerged, uncommitted, &choice, &sure), ios.In, ios.ErrOut); err != nil {
		if errors.Is(err, ErrCancelled) {
			return orchestrator.Keep, nil
		}
		return "", err
	}
	if choice == orchestrator.Discard && (unmerged > 0 || uncommitted > 0) && !sure {
		return orchestrator.Keep, nil
	}
	return choice, nil
}
