package cli

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/charmbracelet/bubbles/key"
	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/huh"

	"github.com/localagent/agent/cmd/agent/internal/termtext"
	"github.com/localagent/agent/orchestrator"
)

// approveAsk is the --approve value that shows the form.
const approveAsk = "ask"

// parseApprove checks an --approve value.
func parseApprove(s string) (string, error) {
	if s == approveAsk || s == approveMergeIfGreen || s == approveSquashIfGreen {
		return s, nil
	}
	d, err := orchestrator.ParseDecision(s)
	if err != nil {
		return "", UsageErrorf("--approve %q: want ask, merge, squash, keep or discard (or merge-if-green, squash-if-green)", s)
	}
	return string(d), nil
}

// errNeedApprove is the answer when a decision is needed and nobody can be
// asked: never prompt without a terminal.
func errNeedApprove(what string) error {
	return UsageErrorf("%s needs a decision but stdin/stdout is not a terminal (or TERM is dumb), so no form can be shown: pass --approve merge|squash|keep|discard (or merge-if-green|squash-if-green: merge only when the last test run passed)", what)
}

// formKeyMap makes Esc abort the form like Ctrl-C does (both keep the branch).
func formKeyMap() *huh.KeyMap {
	km := huh.NewDefaultKeyMap()
	km.Quit = key.NewBinding(key.WithKeys("ctrl+c", "esc"), key.WithHelp("esc", "keep and quit"))
	// Esc while filtering a list ends the filter (see escEndsFilter): it
	// reaches the list as filterDoneKey, which the form does not take for
	// quitting.
	km.Select.SetFilter = key.NewBinding(key.WithKeys("esc", filterDoneKey.String()), key.WithHelp("esc", "set filter"), key.WithDisabled())
	km.MultiSelect.SetFilter = key.NewBinding(key.WithKeys("enter", "esc", filterDoneKey.String()), key.WithHelp("esc", "set filter"), key.WithDisabled())
	return km
}

// filterDoneKey stands for Esc typed in a list's filter.
var filterDoneKey = tea.KeyMsg{Type: tea.KeyF20}

// escEndsFilter is a program filter for forms: Esc typed while the focused
// list is filtering ends the filter instead of quitting the whole form
// (huh checks the form's quit key before the field sees it).
func escEndsFilter(m tea.Model, msg tea.Msg) tea.Msg {
	k, ok := msg.(tea.KeyMsg)
	if !ok || k.Type != tea.KeyEsc || k.Alt {
		return msg
	}
	f, ok := m.(*huh.Form)
	if !ok {
		return msg
	}
	if fl, ok := f.GetFocusedField().(interface{ GetFiltering() bool }); ok && fl.GetFiltering() {
		return filterDoneKey
	}
	return msg
}

// newApprovalForm builds the decision form for a reviewed task. The choice
// lands in *choice, which starts at keep (the default), or at discard when
// the task changed nothing (there is nothing to keep). When discarding
// would lose work (unmerged commits, uncommitted files), choosing discard
// asks again in a second group of the same form; *sure says whether the
// user confirmed. (One form, not two in a row: a second bubbletea program
// on the same input could lose the keys the first one read ahead.)
func newApprovalForm(rv *orchestrator.Review, unmerged, uncommitted int, choice *orchestrator.Decision, sure *bool) *huh.Form {
	return newReviewForm(rv, unmerged, uncommitted, choice, sure, nil)
}

// newReviewForm is the approval form; when changes is not nil it also
// offers Request changes, whose message lands in *changes.
func newReviewForm(rv *orchestrator.Review, unmerged, uncommitted int, choice *orchestrator.Decision, sure *bool, changes *string) *huh.Form {
	*choice = orchestrator.Keep
	if nothingToKeep(rv, unmerged, uncommitted) {
		*choice = orchestrator.Discard
	}
	*sure = false
	into := termtext.Line(rv.BaseBranch)
	var opts []huh.Option[orchestrator.Decision]
	if into != "" && rv.Unmerged > 0 {
		opts = append(opts,
			huh.NewOption(fmt.Sprintf("Merge into %s (a merge commit, --no-ff)", into), orchestrator.Merge),
			huh.NewOption(fmt.Sprintf("Squash-merge into %s (one commit)", into), orchestrator.Squash))
	}
	opts = append(opts,
		huh.NewOption(fmt.Sprintf("Keep branch %s for review", termtext.Line(rv.Branch)), orchestrator.Keep),
		huh.NewOption("Discard the branch and its worktree", orchestrator.Discard))
	if changes != nil {
		*changes = ""
		opts = append(opts, huh.NewOption("Request changes (tell the agent what to do next)", requestChanges))
	}
	desc := fmt.Sprintf("%d commit(s), %s", len(rv.Commits), rv.Stat.String())
	if nothingToKeep(rv, unmerged, uncommitted) {
		desc += "; the agent changed nothing, so there is nothing to keep"
	}
	if rv.BaseMoved {
		desc += fmt.Sprintf("; %s has moved since the task started (merge is tried; a conflict changes nothing)", into)
	}
	mustConfirm := unmerged > 0 || uncommitted > 0
	return huh.NewForm(
		huh.NewGroup(
			huh.NewSelect[orchestrator.Decision]().
				Title(fmt.Sprintf("Task %s: what should happen to its branch?", termtext.Line(rv.Task))).
				Description(desc).
				Options(opts...).
				Value(choice),
		),
		huh.NewGroup(discardConfirm(unmerged, uncommitted, sure)).
			WithHideFunc(func() bool { return *choice != orchestrator.Discard || !mustConfirm }),
		huh.NewGroup(changesInput(changes)).
			WithHideFunc(func() bool { return changes == nil || *choice != requestChanges }),
	).WithKeyMap(formKeyMap()).WithShowHelp(true)
}

// requestChanges is the review form's choice that continues the task with
// the user's message instead of deciding about it.
const requestChanges orchestrator.Decision = "request-changes"

// changesInput asks for the message of Request changes.
func changesInput(changes *string) *huh.Text {
	if changes == nil {
		changes = new(string)
	}
	return huh.NewText().
		Title("What should the agent change?").
		Description("Enter sends it; the task goes on in the same worktree and conversation, then comes back to this review.").
		Placeholder("e.g. also add tests for the new flag").
		Validate(func(s string) error {
			if strings.TrimSpace(s) == "" {
				return errors.New("say what to change (Esc keeps the branch)")
			}
			return nil
		}).
		Value(changes)
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
	err := f.WithProgramOptions(tea.WithFilter(escEndsFilter)).WithInput(in).WithOutput(out).Run()
	if errors.Is(err, huh.ErrUserAborted) {
		return ErrCancelled
	}
	return err
}

// nothingToKeep reports a task that changed nothing: no commits, no
// uncommitted files, no changed files.
func nothingToKeep(rv *orchestrator.Review, unmerged, uncommitted int) bool {
	return unmerged == 0 && uncommitted == 0 && len(rv.Commits) == 0 && len(rv.Stat.Files) == 0
}

// askDecision shows the approval form. Declining the confirmation of a
// discard keeps the branch; backing out (Esc, Ctrl-C) keeps it too and
// comes back as ErrCancelled with the keep decision, so the command exits
// 130 after keeping.
func askDecision(ios *IOStreams, rv *orchestrator.Review, unmerged, uncommitted int) (orchestrator.Decision, error) {
	d, _, err := askReview(ios, rv, unmerged, uncommitted, false)
	return d, err
}

// askReview is askDecision that can also answer requestChanges with the
// user's message (when canChange).
func askReview(ios *IOStreams, rv *orchestrator.Review, unmerged, uncommitted int, canChange bool) (orchestrator.Decision, string, error) {
	var choice orchestrator.Decision
	var sure bool
	var changes *string
	if canChange {
		changes = new(string)
	}
	in, done := ios.formInput()
	defer done()
	if err := runForm(newReviewForm(rv, unmerged, uncommitted, &choice, &sure, changes), in, ios.ErrOut); err != nil {
		if errors.Is(err, ErrCancelled) {
			return orchestrator.Keep, "", ErrCancelled
		}
		return "", "", err
	}
	if choice == orchestrator.Discard && (unmerged > 0 || uncommitted > 0) && !sure {
		return orchestrator.Keep, "", nil
	}
	if choice == requestChanges {
		return choice, strings.TrimSpace(*changes), nil
	}
	return choice, "", nil
}
