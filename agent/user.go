package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// Tools that talk to the person running the task.
const (
	ToolAskUser     = "ask_user"
	ToolPresentPlan = "present_plan"
)

// User is the person at the terminal. The command layer implements it with
// forms; the agent never draws anything itself. A nil User means nobody can
// be asked (no terminal).
type User interface {
	// ReviewPlan shows a plan and returns the user's verdict.
	ReviewPlan(ctx context.Context, plan string) (PlanReview, error)
	// Ask asks a question, with options to choose from when given, and
	// returns the answer.
	Ask(ctx context.Context, question string, options []string) (string, error)
}

// PlanReview is the user's verdict on a plan.
type PlanReview struct {
	Approved bool
	// Plan is the plan as approved (the user may have edited it).
	Plan string
	// Feedback says why a plan was rejected, or what to change.
	Feedback string
}

// ErrUserCancelled is returned by a User whose form was cancelled (Esc,
// Ctrl-C): the question stays unanswered.
var ErrUserCancelled = errors.New("the user cancelled the question")

// NoUserAnswer starts the result of ask_user when nobody can be asked.
const NoUserAnswer = "no user available"

var userToolSpecs = []toolSpec{
	{
		name: ToolAskUser, kind: kindLocalWrite,
		oneLine: "ask the user a question and wait for the answer",
		description: "Ask the person who gave you the task a question when you cannot decide yourself (an ambiguous " +
			"requirement, a choice between approaches). Give options when the answer is one of a few. Ask rarely: " +
			"there may be nobody there, and then you must decide yourself.",
		schema: `{"type":"object","properties":{
			"question":{"type":"string","minLength":1,"description":"The question, self-contained."},
			"options":{"type":"array","maxItems":10,"items":{"type":"string","minLength":1},"description":"Possible answers to choose from."}},
			"required":["question"]}`,
	},
	{
		name: ToolPresentPlan, kind: kindLocalWrite,
		oneLine: "present your plan for approval (plan mode)",
		description: "In plan mode, present your plan: the steps you will take and the files you will change. The user " +
			"approves, edits or rejects it. Until a plan is approved only reading tools work.",
		schema: `{"type":"object","properties":{
			"plan":{"type":"string","minLength":1,"description":"The plan, as a numbered list of steps."}},
			"required":["plan"]}`,
	},
}

// planGate refuses tools that change anything while a plan awaits
// approval. It returns "" when the call may run.
func (r *toolRunner) planGate(name string) string {
	r.mu.Lock()
	waiting := r.planMode && !r.planApproved
	r.mu.Unlock()
	if !waiting {
		return ""
	}
	spec := r.cat.specs[name]
	if _, isMCP := r.mcp[name]; isMCP {
		spec = nil
	} else if spec == nil || spec.readOnly() || name == ToolTodoWrite || name == ToolPresentPlan || name == ToolAskUser {
		return ""
	}
	return fmt.Sprintf("%s is not allowed yet: this task is in plan mode. Read and search the code, then present your plan "+
		"with present_plan; once the user approves it, every tool works.", name)
}

func (r *toolRunner) presentPlan(ctx context.Context, args []byte) (ToolResult, error) {
	var a struct {
		Plan string `json:"plan"`
	}
	if err := json.Unmarshal(args, &a); err != nil {
		return errResult("present_plan: %v", err), nil
	}
	r.mu.Lock()
	approved := r.planApproved
	r.mu.Unlock()
	if approved {
		return ToolResult{Output: "the plan was already approved; carry it out"}, nil
	}
	if r.user == nil {
		return errResult("present_plan: %s to approve the plan; stop and summarise the plan as your answer", NoUserAnswer), nil
	}
	rv, err := r.user.ReviewPlan(ctx, a.Plan)
	if errors.Is(err, ErrUserCancelled) {
		return errResult("present_plan: the user closed the plan without approving it; stop and summarise the plan as your answer"), nil
	}
	if err != nil {
		return ToolResult{}, fmt.Errorf("present_plan: %w", err)
	}
	if !rv.Approved {
		msg := "The user rejected the plan."
		if fb := strings.TrimSpace(rv.Feedback); fb != "" {
			msg += " Their feedback: " + fb
		}
		return errResult("%s Revise the plan and present it again.", msg), nil
	}
	r.mu.Lock()
	r.planApproved = true
	r.mu.Unlock()
	out := "The user approved the plan. Carry it out now; every tool works."
	if p := strings.TrimSpace(rv.Plan); p != "" && p != strings.TrimSpace(a.Plan) {
		out += "\nThe user edited it; follow this version:\n" + p
	}
	return ToolResult{Output: out}, nil
}

func (r *toolRunner) askUser(ctx context.Context, args []byte) (ToolResult, error) {
	var a struct {
		Question string   `json:"question"`
		Options  []string `json:"options"`
	}
	if err := json.Unmarshal(args, &a); err != nil {
		return errResult("ask_user: %v", err), nil
	}
	if r.user == nil {
		return errResult("ask_user: %s (the task runs without a terminal). Decide yourself, and say in your summary what you assumed.", NoUserAnswer), nil
	}
	ans, err := r.user.Ask(ctx, a.Question, a.Options)
	if errors.Is(err, ErrUserCancelled) {
		return errResult("ask_user: the user did not answer. Decide yourself, and say in your summary what you assumed."), nil
	}
	if err != nil {
		return ToolResult{}, fmt.Errorf("ask_user: %w", err)
	}
	return ToolResult{Output: "The user answered: " + ans}, nil
}

// optionalTools are left out when the context window is too small for
// every tool definition (see Agent.lean): the agent works without them.
var optionalTools = map[string]bool{
	"process_start": true, "process_output": true, "process_stop": true,
	"git_diff": true, "git_log": true, "git_show": true, "git_blame": true,
	ToolAskUser: true, ToolRemember: true, ToolWebFetch: true,
}
