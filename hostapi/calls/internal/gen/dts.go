package main

import (
	"fmt"
	"reflect"
	"strings"

	"github.com/poligon/poligon/hostapi/calls"
)

// tsNames are the names (and docs) poligon.d.ts gives the answer types a
// script sees, where they differ from the Go ones; any other type keeps
// its Go name and doc comment.
var tsNames = map[string]struct{ name, doc string }{
	"ExecAnswer":       {"ExecResult", "A finished command."},
	"RunAnswer":        {"RunState", "Where a detached command is."},
	"ExecGUIAnswer":    {"GuiLaunch", "Whether a GUI program still runs 2 s after its launch, and its first output."},
	"ShotAnswer":       {"Shot", "A screenshot kept for this run."},
	"ReadAnswer":       {"Reading", "What screen.read answers: the text of one frame, top to bottom."},
	"TextAnswer":       {"TextSpot", "Where text is: x, y its centre (where a click lands), box its extent, text what was read there."},
	"ClickLabelAnswer": {"LabelClick", "Where mouse.clickLabel clicked, and how it found the label."},
}

// docWidth bounds the lines of a generated doc comment, indent included.
const docWidth = 118

// dts answers the two generated parts of poligon.d.ts: the answer types
// and the verbs of the VM interface.
type dts struct {
	m       *model
	visible []reflect.Type // the types a script sees, in the order it meets them
}

func (m *model) dts() *dts {
	d := &dts{m: m}
	for _, c := range m.calls {
		d.resolve(c.Result.TS, c)
		d.resolve(argTSOf(c.Params), c)
	}
	return d
}

func (d *dts) see(t reflect.Type) {
	for t.Kind() == reflect.Slice {
		t = t.Elem()
	}
	if d.m.typesOf[t.Name()] != t {
		return
	}
	for _, v := range d.visible {
		if v == t {
			return
		}
	}
	d.visible = append(d.visible, t)
	for _, f := range jsonFields(t) {
		if f.Tag.Get("ts") == "" {
			d.see(f.Type)
		}
	}
}

// resolve answers a TypeScript type template with its placeholders named,
// and marks their types visible.
func (d *dts) resolve(ts string, c *call) string {
	return placeholder.ReplaceAllStringFunc(ts, func(ph string) string {
		t := c.answer
		if name := ph[1 : len(ph)-1]; name != "answer" {
			t = d.m.typesOf[name]
		}
		d.see(t)
		return d.typeOf(t)
	})
}

func tsName(t reflect.Type) string {
	if n, ok := tsNames[t.Name()]; ok {
		return n.name
	}
	return t.Name()
}

// typeOf is the TypeScript of a Go type.
func (d *dts) typeOf(t reflect.Type) string {
	switch {
	case t == rawMessage:
		return "unknown"
	case t.Kind() == reflect.String:
		return "string"
	case t.Kind() == reflect.Bool:
		return "boolean"
	case isNumber(t):
		return "number"
	case t.Kind() == reflect.Slice:
		return d.typeOf(t.Elem()) + "[]"
	case t.Kind() == reflect.Map && t.Key().Kind() == reflect.String:
		return "{ [name: string]: " + d.typeOf(t.Elem()) + " }"
	case t.Kind() == reflect.Struct && d.m.typesOf[t.Name()] == t:
		d.see(t)
		return tsName(t)
	}
	panic(fmt.Sprintf("no TypeScript for %s", t))
}

// fieldOf is a field as an interface member or an option: name, whether
// optional, type.
func (d *dts) fieldOf(f reflect.StructField) (name string, optional bool, ts string) {
	if tag := f.Tag.Get("ts"); tag != "" {
		return jsonName(f), false, tag
	}
	return jsonName(f), jsonOmitEmpty(f), d.typeOf(f.Type)
}

// doc writes a doc comment at indent: one line when it fits.
func doc(b *strings.Builder, indent string, paragraphs ...string) {
	var parts []string
	for _, p := range paragraphs {
		if p != "" {
			parts = append(parts, p)
		}
	}
	if len(parts) == 0 {
		return
	}
	if one := indent + "/** " + strings.Join(parts, " ") + " */"; len(one) <= docWidth {
		b.WriteString(one + "\n")
		return
	}
	b.WriteString(indent + "/**\n")
	for _, p := range parts {
		for _, l := range wrap(p, docWidth-len(indent)-3) {
			b.WriteString(indent + " * " + l + "\n")
		}
	}
	b.WriteString(indent + " */\n")
}

// types renders the interfaces of the visible types.
func (d *dts) types() string {
	var b strings.Builder
	for i := 0; i < len(d.visible); i++ { // rendering a type may see more
		t := d.visible[i]
		if i > 0 {
			b.WriteString("\n")
		}
		text := d.m.docs[t.Name()].doc
		if n, ok := tsNames[t.Name()]; ok {
			text = n.doc
		} else if rest, ok := strings.CutPrefix(text, t.Name()+" is "); ok {
			text = sentence(rest) // "Box is a rectangle" -> "A rectangle"
		}
		doc(&b, "  ", text)
		fmt.Fprintf(&b, "  interface %s {\n", tsName(t))
		for _, f := range jsonFields(t) {
			doc(&b, "    ", prose(d.fieldDoc(t, f)))
			name, optional, ts := d.fieldOf(f)
			fmt.Fprintf(&b, "    %s%s: %s;\n", name, map[bool]string{true: "?"}[optional], ts)
		}
		b.WriteString("  }\n")
	}
	return b.String()
}

// fieldDoc is the comment of field f of t, where it is declared (t, or a
// struct t embeds).
func (d *dts) fieldDoc(t reflect.Type, f reflect.StructField) string {
	owner := t
	if s, _ := t.FieldByName(f.Name); len(s.Index) > 1 {
		owner = t.FieldByIndex(s.Index[:len(s.Index)-1]).Type
	}
	return d.m.docs[owner.Name()].fields[f.Name]
}

// verbs renders the members of the VM interface, grouped as vm is.
func (d *dts) verbs() string {
	var b strings.Builder
	group := ""
	for _, c := range d.m.calls {
		g, name := c.jsVerb()
		if g != group {
			if group != "" {
				b.WriteString("    };\n")
			}
			b.WriteString("\n")
			if g != "" {
				doc(&b, "    ", calls.Groups[g])
				fmt.Fprintf(&b, "    %s: {\n", g)
			}
			group = g
		}
		indent := "    "
		if g != "" {
			indent = "      "
		}
		doc(&b, indent, strings.TrimSpace(sentence(c.Doc)+" "+c.Result.Doc), defaultsLine(c))
		fmt.Fprintf(&b, "%s%s(%s): %s;\n", indent, name, d.params(c), d.resolve(c.Result.TS, c))
	}
	if group != "" {
		b.WriteString("    };\n")
	}
	return strings.TrimPrefix(b.String(), "\n")
}

// params renders a verb's parameter list: positional, then opts.
func (d *dts) params(c *call) string {
	var out []string
	for _, p := range c.Params {
		if a, ok := argTS[p.JS]; ok {
			out = append(out, fmt.Sprintf("%s%s: %s", p.Name, map[bool]string{true: "?"}[a.optional], d.resolve(a.ts, c)))
			continue
		}
		_, _, ts := d.fieldOf(c.field(p))
		out = append(out, p.Name+": "+ts)
	}
	if len(c.Options) > 0 {
		var opts []string
		for _, o := range c.Options {
			_, _, ts := d.fieldOf(c.fields[o.Name])
			opts = append(opts, o.Name+"?: "+ts)
		}
		out = append(out, "opts?: { "+strings.Join(opts, "; ")+" }")
	}
	return strings.Join(out, ", ")
}
