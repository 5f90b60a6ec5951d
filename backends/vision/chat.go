package vision

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"unicode/utf8"
)

// Message is one message of a text-only conversation.
type Message struct {
	Role    string `json:"role"` // system | user | assistant
	Content string `json:"content"`
}

// Reply is a text-only completion.
type Reply struct {
	// Text is message.content, the answer. Reasoning is message.reasoning or
	// reasoning_content (qwen, vLLM), kept apart: it is the model's
	// scratchpad and never the answer, even when the content is empty.
	Text, Reasoning string
	FinishReason    string // "length": cut at max_tokens
	// PromptTokens and CompletionTokens are 0 when the endpoint sent no
	// usage (UsageMissing).
	PromptTokens, CompletionTokens int
	UsageMissing                   bool
	Call                           Call
}

type seqKey struct{}

// WithSeq numbers a model call inside one tool call (a retry is seq 2), for
// its log line.
func WithSeq(ctx context.Context, n int) context.Context {
	return context.WithValue(ctx, seqKey{}, n)
}

// Chat sends a text-only conversation and answers the completion. A reply
// cut at the token cap is no error (FinishReason says so); an error means
// no completion came, and is an *Error with a hint.
func (c *Client) Chat(ctx context.Context, msgs []Message) (Reply, error) {
	if len(msgs) == 0 {
		return Reply{}, errors.New(c.ep.Purpose + " model: no messages to send")
	}
	ex := &exchange{call: Call{Model: c.ep.Model}}
	if err := c.post(ctx, ex, c.chatBody(msgs)); err != nil {
		return Reply{Call: ex.call}, err
	}
	r := Reply{
		Text: ex.content, Reasoning: ex.reasoning, FinishReason: ex.call.Finish,
		PromptTokens: ex.call.PromptTokens, CompletionTokens: ex.call.CompletionTokens,
		UsageMissing: ex.call.UsageMissing, Call: ex.call,
	}
	c.logChat(ctx, ex)
	if r.FinishReason == "length" {
		c.incomplete.Add(1)
		c.record(ctx, ex, CategoryCapped, "length", "")
	}
	return r, nil
}

// chatBody writes the request: the fixed fields, then model and messages.
func (c *Client) chatBody(msgs []Message) []byte {
	var b bytes.Buffer
	b.Write(c.head)
	b.WriteString(`"model":`)
	writeJSONString(&b, c.ep.Model)
	b.WriteString(`,"messages":`)
	m, _ := json.Marshal(msgs) // strings only: always marshals
	b.Write(m)
	b.WriteByte('}')
	return b.Bytes()
}

// logChat writes the call's one info line (and the answer's head at debug).
func (c *Client) logChat(ctx context.Context, ex *exchange) {
	attrs := []any{
		"purpose", c.ep.Purpose, "model", c.ep.Model, "ms", ex.call.Duration.Milliseconds(),
		"status", ex.call.Status, "prompt_tokens", ex.call.PromptTokens, "completion_tokens", ex.call.CompletionTokens,
		"usage", !ex.call.UsageMissing, "finish", ex.call.Finish,
		"answer_chars", utf8.RuneCountInString(ex.content), "reasoning_chars", utf8.RuneCountInString(ex.reasoning),
	}
	if id := requestID(ctx); id != "" {
		attrs = append(attrs, "req", id)
	}
	if n, ok := ctx.Value(seqKey{}).(int); ok {
		attrs = append(attrs, "seq", n)
	}
	c.log.InfoContext(ctx, "model", attrs...)
	if c.log.Enabled(ctx, slog.LevelDebug) {
		c.log.DebugContext(ctx, "model answer", "purpose", c.ep.Purpose, "answer", c.scrub.head(ex.content, 600))
	}
}
