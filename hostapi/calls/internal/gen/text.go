package main

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// begin and end mark a generated part of a file that is otherwise written
// by hand; the generator replaces the lines between them.
func begin(name string) string {
	return "BEGIN GENERATED " + name + ": go generate ./hostapi/calls writes this part from hostapi/calls/registry.go; do not edit."
}

func end(name string) string { return "END GENERATED " + name }

// splice replaces the lines between the markers of part name in src.
func splice(src, name, content string) (string, error) {
	lines := strings.SplitAfter(src, "\n")
	from, to := -1, -1
	for i, l := range lines {
		switch {
		case strings.Contains(l, "BEGIN GENERATED "+name+":"):
			from = i
		case strings.Contains(l, end(name)) && from >= 0:
			to = i
		}
		if to >= 0 {
			break
		}
	}
	if from < 0 || to < 0 {
		return "", fmt.Errorf("no lines marked %q ... %q", "BEGIN GENERATED "+name, end(name))
	}
	indent := lines[from][:len(lines[from])-len(strings.TrimLeft(lines[from], " \t"))]
	marker := strings.TrimSpace(lines[from])
	comment := marker[:strings.Index(marker, "BEGIN")] // "// "
	var b strings.Builder
	for _, l := range lines[:from] {
		b.WriteString(l)
	}
	b.WriteString(indent + comment + begin(name) + "\n")
	b.WriteString(content)
	for _, l := range lines[to:] {
		b.WriteString(l)
	}
	return b.String(), nil
}

// sentence capitalizes a registry doc for a reader who sees no subject.
func sentence(s string) string {
	r, n := utf8.DecodeRuneInString(s)
	return string(unicode.ToUpper(r)) + s[n:]
}

// prose turns a Go field comment into a sentence.
func prose(s string) string {
	if s == "" {
		return ""
	}
	s = sentence(s)
	if !strings.HasSuffix(s, ".") {
		s += "."
	}
	return s
}

// lowerFirst makes "The VM's screen." the end of "Screen is the VM's screen.".
func lowerFirst(s string) string {
	r, n := utf8.DecodeRuneInString(s)
	return string(unicode.ToLower(r)) + s[n:]
}

// wrap breaks text into lines of at most width characters (a longer word
// keeps its own line).
func wrap(text string, width int) []string {
	var lines []string
	line := ""
	for _, w := range strings.Fields(text) {
		switch {
		case line == "":
			line = w
		case utf8.RuneCountInString(line)+1+utf8.RuneCountInString(w) <= width:
			line += " " + w
		default:
			lines = append(lines, line)
			line = w
		}
	}
	if line != "" {
		lines = append(lines, line)
	}
	return lines
}

// literal writes a default as the docs show it: 120, "test".
func literal(v any) string {
	if s, ok := v.(string); ok {
		return strconv.Quote(s)
	}
	return fmt.Sprint(v)
}

// defaultsLine is a call's "Defaults: timeout 120, user "test"." or "".
func defaultsLine(c *call) string {
	var parts []string
	for _, o := range c.Options {
		if o.Default != nil {
			parts = append(parts, o.Name+" "+literal(o.Default))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return "Defaults: " + strings.Join(parts, ", ") + "."
}
