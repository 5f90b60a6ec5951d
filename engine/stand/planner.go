package stand

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/poligon/poligon/backends/vision"
	"github.com/poligon/poligon/config"
)

// attempts is how many times the model may answer: the first plan, and one
// correction after the validator's complaints.
const attempts = 2

// Planner asks a text model for a stand plan (stand_plan) and checks the
// answer with the validator stand_apply uses.
type Planner struct {
	client *vision.Client
	notes  string
}

// Answer is stand_plan's answer. Every answer, refusal and draft alike,
// carries the attempts, the model and the tokens summed over attempts.
type Answer struct {
	OK               bool            `json:"ok"`
	Plan             json.RawMessage `json:"plan,omitempty"` // as the model wrote it (compacted); a draft when !Valid
	Valid            bool            `json:"valid"`
	Errors           []string        `json:"errors"` // the validator's complaints about Plan
	Attempts         int             `json:"attempts"`
	Model            string          `json:"model"`
	Notes            string          `json:"notes,omitempty"` // the plan's notes
	PromptTokens     int             `json:"prompt_tokens"`
	CompletionTokens int             `json:"completion_tokens"`
	Error            string          `json:"error,omitempty"`
}

// NewPlanner makes the planner of cfg (nil, nil when no planner endpoint is
// configured). o carries the log, the event recorder and the HTTP client.
func NewPlanner(cfg config.Planner, o vision.Options) (*Planner, error) {
	if !cfg.Configured() {
		return nil, nil
	}
	notes, err := LoadNotes(cfg.Notes)
	if err != nil {
		return nil, err
	}
	var opts json.RawMessage
	if cfg.Options != "" {
		opts = json.RawMessage(cfg.Options)
	}
	c, err := vision.New(vision.Endpoint{
		Purpose: vision.PurposePlanner, URL: cfg.API, Key: cfg.Key.Reveal(), Model: cfg.Model,
		Options: opts, Timeout: cfg.Timeout.Duration,
	}, o)
	if err != nil {
		return nil, fmt.Errorf("planner model: %w", err)
	}
	return &Planner{client: c, notes: notes}, nil
}

// Model names the planner model.
func (p *Planner) Model() string { return p.client.Model() }

// Stats are the model client's counters.
func (p *Planner) Stats() vision.Stats { return p.client.Stats() }

// Plan asks the model for a plan for goal, checked against env. A bad plan
// is no error: it comes back as a draft (Valid false, Errors) or a refusal
// (Error). The error is only for a model call that got no answer (a
// *vision.Error with a hint).
func (p *Planner) Plan(ctx context.Context, goal string, env Env) (Answer, error) {
	a := Answer{Model: p.Model(), Errors: []string{}}
	goal = strings.TrimSpace(goal)
	if goal == "" {
		a.Error = "the goal is empty: say in plain language which machines the stand needs and what to set up or check on them"
		return a, nil
	}
	msgs := []vision.Message{{Role: "system", Content: SystemPrompt(env, p.notes)}, {Role: "user", Content: goal}}
	for attempt := 1; ; attempt++ {
		r, err := p.client.Chat(vision.WithSeq(ctx, attempt), msgs)
		a.Attempts = attempt
		a.PromptTokens += r.PromptTokens
		a.CompletionTokens += r.CompletionTokens
		if err != nil {
			return a, err
		}
		v := judge(r, env)
		a.Plan, a.Notes = v.plan, v.notes
		switch {
		case v.refusal != "":
			a.Plan, a.Error = nil, "the planner says the goal cannot be built: "+v.refusal
			return a, nil
		case len(v.problems) == 0:
			a.OK, a.Valid = true, true
			return a, nil
		case attempt == attempts:
			a.Errors = v.problems
			a.Error = fmt.Sprintf("the planner's plan is still invalid after %d attempts: fix the errors in this draft and pass it to stand_apply, or call stand_plan with a clearer goal", attempts)
			if a.Plan == nil {
				a.Error = fmt.Sprintf("the planner answered no usable plan in %d attempts: write the plan yourself (see errors) and pass it to stand_apply", attempts)
			}
			if v.cut {
				a.Error = p.cutError()
			}
			return a, nil
		}
		msgs = append(msgs, vision.Message{Role: "assistant", Content: v.shown}, vision.Message{Role: "user", Content: retryPrompt(v.problems)})
	}
}

// cutError says the last answer ran into max_tokens and how to raise it:
// a retry cannot help when the plan needs more tokens than the limit.
func (p *Planner) cutError() string {
	n := p.client.MaxTokens()
	return fmt.Sprintf(`the planner's answer was cut at the token limit (finish_reason length; max_tokens is %d) in attempt %d of %d: raise max_tokens in [planner] options or PV_AI_PLAN_OPTIONS, e.g. {"max_tokens":%d}, and call stand_plan again; or write the plan yourself (see errors) and pass it to stand_apply`, n, attempts, attempts, 2*n)
}

// verdict is what one reply amounts to.
type verdict struct {
	plan     json.RawMessage // the object found, compacted; nil when none
	notes    string
	refusal  string   // the model's {"error": ...}
	problems []string // why it is no valid plan; empty when it is
	shown    string   // the reply as the model's turn of a retry
	cut      bool     // the reply ended at max_tokens
}

// judge reads a reply: the JSON object in its content (never in its
// reasoning), checked against env.
func judge(r vision.Reply, env Env) verdict {
	text := stripThinking(r.Text)
	v := verdict{shown: text}
	if v.shown == "" {
		v.shown = "(no answer)"
	}
	cut := r.FinishReason == "length"
	v.cut = cut
	obj, problem := extractObject(text)
	switch {
	case obj == nil && strings.TrimSpace(r.Text) == "" && r.Reasoning != "":
		problem = "your answer had no content, only reasoning: answer the plan itself as the message"
	case obj != nil:
		var top map[string]json.RawMessage
		json.Unmarshal(obj, &top) // extractObject answers objects only
		if e, ok := top["error"]; ok && top["machines"] == nil {
			v.refusal = refusalText(e)
			return v
		}
		v.plan = obj
		res, probs := Check(obj, env)
		if len(probs) == 0 {
			v.notes = res.Notes
			return v
		}
		for _, p := range probs {
			v.problems = append(v.problems, p.String())
		}
	}
	if problem != "" {
		v.problems = append(v.problems, problem)
	}
	if cut {
		v.problems = append([]string{"your answer was cut off at the token limit (finish_reason length) before it ended: answer the plan alone, with no explanation and no thinking, and keep it short"}, v.problems...)
	}
	return v
}

// stripThinking removes <think>...</think> blocks: an unclosed one runs to
// the end (the reply was cut while thinking), and a closing tag without an
// opening one (the server ate it) ends a thought that began the reply.
func stripThinking(s string) string {
	const open, closing = "<think>", "</think>"
	for {
		i, j := strings.Index(s, open), strings.Index(s, closing)
		switch {
		case j >= 0 && (i < 0 || j < i):
			s = s[j+len(closing):]
		case i >= 0 && j < 0:
			s = s[:i]
		case i >= 0:
			s = s[:i] + s[j+len(closing):]
		default:
			return strings.TrimSpace(s)
		}
	}
}

// extractObject finds the plan in prose, code fences and all: the first
// JSON object that looks like a plan or a refusal, else the object at the
// first '{'. The problem says why there is none.
func extractObject(text string) (json.RawMessage, string) {
	start := strings.IndexByte(text, '{')
	if start < 0 {
		return nil, "your answer has no JSON object: answer the plan as one JSON object, with no prose around it"
	}
	var first json.RawMessage
	var firstErr error
	for i := start; ; {
		var raw json.RawMessage
		err := json.NewDecoder(strings.NewReader(text[i:])).Decode(&raw)
		if err == nil && looksLikePlan(raw) {
			first = raw
			break
		}
		if i == start {
			first, firstErr = raw, err
		}
		next := strings.IndexByte(text[i+1:], '{')
		if next < 0 {
			break
		}
		i += 1 + next
	}
	if firstErr == nil || looksLikePlan(first) {
		var b bytes.Buffer
		json.Compact(&b, first) // it decoded, so it compacts
		return b.Bytes(), ""
	}
	var syn *json.SyntaxError
	switch {
	case errors.Is(firstErr, io.ErrUnexpectedEOF) || errors.Is(firstErr, io.EOF):
		return nil, "your JSON object is not closed (the answer ended inside it): answer the whole plan as one JSON object"
	case errors.As(firstErr, &syn):
		return nil, fmt.Sprintf("your answer is not valid JSON: %v at byte %d of the object: answer the plan as one JSON object", syn, syn.Offset)
	default:
		return nil, fmt.Sprintf("your answer is not valid JSON (%v): answer the plan as one JSON object", firstErr)
	}
}

// looksLikePlan: a top-level object of a plan or a refusal, not one of its
// inner objects.
func looksLikePlan(raw json.RawMessage) bool {
	var top map[string]json.RawMessage
	if json.Unmarshal(raw, &top) != nil {
		return false
	}
	_, plan := top["machines"]
	_, refusal := top["error"]
	return plan || refusal
}

// refusalText reads {"error": "why"} (a non-string why as written).
func refusalText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) != nil {
		s = string(raw)
	}
	if s = strings.TrimSpace(s); s == "" {
		return "(no reason given)"
	}
	return s
}
