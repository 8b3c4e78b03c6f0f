package cli

import (
	"context"
	"errors"
	"strings"

	"github.com/charmbracelet/huh"

	"github.com/localagent/agent/agent"
	"github.com/localagent/agent/cmd/agent/internal/termtext"
)

// formUser is agent.User on the terminal: plan approval and ask_user as
// huh forms. The live status line is held still while a form runs (the
// agent loop is waiting for the answer, so nothing else is drawn).
type formUser struct {
	ios *IOStreams
	r   *eventRenderer
}

var _ agent.User = (*formUser)(nil)

// Plan verdicts offered by the plan form.
const (
	planApprove = "approve"
	planEdit    = "edit"
	planReject  = "reject"
)

// hold stops the renderer's output while a form has the terminal.
func (u *formUser) hold() func() {
	u.r.mu.Lock()
	u.r.status.clear()
	if u.r.midLine {
		u.r.w.Write([]byte("\n"))
		u.r.midLine = false
	}
	return u.r.mu.Unlock
}

// newPlanForm builds the plan approval form: approve, edit (the plan in an
// editor field), or reject (with what should change).
func newPlanForm(plan string, choice, edited, feedback *string) *huh.Form {
	*choice, *edited, *feedback = planApprove, plan, ""
	return huh.NewForm(
		huh.NewGroup(
			huh.NewSelect[string]().
				Title("The agent's plan. Approve this plan?").
				Description(plan).
				Options(
					huh.NewOption("Approve: carry it out", planApprove),
					huh.NewOption("Edit it, then carry it out", planEdit),
					huh.NewOption("Reject: ask for a new plan", planReject)).
				Value(choice),
		),
		huh.NewGroup(huh.NewText().Title("Edit the plan").Value(edited).CharLimit(20000)).
			WithHideFunc(func() bool { return *choice != planEdit }),
		huh.NewGroup(huh.NewInput().Title("What should change?").Value(feedback)).
			WithHideFunc(func() bool { return *choice != planReject }),
	).WithKeyMap(formKeyMap()).WithShowHelp(true)
}

func (u *formUser) ReviewPlan(_ context.Context, plan string) (agent.PlanReview, error) {
	defer u.hold()()
	var choice, edited, feedback string
	in, done := u.ios.formInput()
	defer done()
	err := runForm(newPlanForm(termtext.Text(plan), &choice, &edited, &feedback), in, u.ios.ErrOut)
	if errors.Is(err, ErrCancelled) {
		return agent.PlanReview{}, agent.ErrUserCancelled
	}
	if err != nil {
		return agent.PlanReview{}, err
	}
	switch choice {
	case planApprove:
		return agent.PlanReview{Approved: true, Plan: plan}, nil
	case planEdit:
		return agent.PlanReview{Approved: true, Plan: edited}, nil
	}
	return agent.PlanReview{Feedback: feedback}, nil
}

// newAskForm builds the ask_user form: a choice among the options when
// there are any, else a line of text.
func newAskForm(question string, options []string, answer *string) *huh.Form {
	*answer = ""
	if len(options) > 0 {
		opts := make([]huh.Option[string], 0, len(options))
		for _, o := range options {
			opts = append(opts, huh.NewOption(o, o))
		}
		return huh.NewForm(huh.NewGroup(
			huh.NewSelect[string]().Title("The agent asks: " + question).Options(opts...).Value(answer),
		)).WithKeyMap(formKeyMap()).WithShowHelp(true)
	}
	return huh.NewForm(huh.NewGroup(
		huh.NewInput().Title("The agent asks: " + question).Value(answer),
	)).WithKeyMap(formKeyMap()).WithShowHelp(true)
}

func (u *formUser) Ask(_ context.Context, question string, options []string) (string, error) {
	defer u.hold()()
	clean := make([]string, 0, len(options))
	for _, o := range options {
		if o = strings.TrimSpace(termtext.Text(o)); o != "" {
			clean = append(clean, o)
		}
	}
	var answer string
	in, done := u.ios.formInput()
	defer done()
	err := runForm(newAskForm(termtext.Text(question), clean, &answer), in, u.ios.ErrOut)
	if errors.Is(err, ErrCancelled) {
		return "", agent.ErrUserCancelled
	}
	return answer, err
}
