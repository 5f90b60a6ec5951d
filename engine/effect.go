package engine

import "github.com/modelcontextprotocol/go-sdk/mcp"

// What a tool can do to the world, declared once on its definition with the
// reason; its MCP annotations follow from it, so a client that approves
// tools by their hints approves what they really do:
//   - read-only: changes no machine (no VM, no bench, not the server's disk);
//   - additive: changes something but loses nothing;
//   - destructive: can lose data or state (a file's content, a VM's unsaved
//     state, work open in a desktop);
//   - idempotent: a second identical call changes nothing more;
//   - open world: what it makes the guest, or a model endpoint, see or do
//     reaches beyond the bench.
type Effect struct {
	Class      EffectClass
	Idempotent bool
	OpenWorld  bool
	Why        string // for people reviewing the policy (the README's tools table)
}

// EffectClass is how much a tool can change.
type EffectClass string

const (
	ReadOnly    EffectClass = "read-only"
	Additive    EffectClass = "additive"
	Destructive EffectClass = "destructive"
)

// The effects tools declare, each with its reason.
func readOnly(why string) Effect    { return Effect{Class: ReadOnly, Idempotent: true, Why: why} }
func additive(why string) Effect    { return Effect{Class: Additive, Why: why} }
func destructive(why string) Effect { return Effect{Class: Destructive, Why: why} }

// additiveOnce and destructiveOnce: a second identical call changes
// nothing more.
func additiveOnce(why string) Effect { return Effect{Class: Additive, Idempotent: true, Why: why} }
func destructiveOnce(why string) Effect {
	return Effect{Class: Destructive, Idempotent: true, Why: why}
}

// runsInGuest: a command or input the caller chose, run as root or as the
// desktop user; anything may follow.
func runsInGuest(why string) Effect {
	return Effect{Class: Destructive, OpenWorld: true, Why: why}
}

// reaching marks an effect whose call sends what it sees beyond the bench
// (a model endpoint).
func (e Effect) reaching() Effect { e.OpenWorld = true; return e }

// annotations are the MCP hints of the effect, with the tool's title.
func (e Effect) annotations(title string) mcp.ToolAnnotations {
	return mcp.ToolAnnotations{
		Title:           title,
		ReadOnlyHint:    e.Class == ReadOnly,
		DestructiveHint: ptr(e.Class == Destructive),
		IdempotentHint:  e.Idempotent,
		OpenWorldHint:   ptr(e.OpenWorld),
	}
}
