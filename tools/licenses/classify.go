package main

import (
	"regexp"
	"slices"
	"strings"
)

// A license is known by phrases only its text has: the full texts are long
// and their copyright lines vary, but these sentences do not.
type marker struct {
	id  string
	all []string // every phrase must be present (normalized text)
	not []string // and none of these
}

var markers = []marker{
	{id: "Apache-2.0", all: []string{"apache license", "version 2.0"}},
	{id: "MPL-2.0", all: []string{"mozilla public license", "2.0", "\"source code form\""}},
	{id: "MIT", all: []string{"permission is hereby granted, free of charge, to any person obtaining a copy"}},
	{id: "ISC", all: []string{"permission to use, copy, modify, and", "distribute this software for any purpose with or without fee is hereby granted",
		"provided that the above copyright notice and this permission notice appear in all copies"}},
	{id: "0BSD", all: []string{"permission to use, copy, modify, and", "distribute this software for any purpose with or without fee is hereby granted"},
		not: []string{"provided that the above copyright notice and this permission notice appear in all copies"}},
	{id: "BSD-4-Clause", all: []string{"redistribution and use in source and binary forms", "all advertising materials mentioning"}},
	{id: "BSD-3-Clause", all: []string{"redistribution and use in source and binary forms", "to endorse or promote products derived from this software"},
		not: []string{"all advertising materials mentioning"}},
	{id: "BSD-2-Clause", all: []string{"redistribution and use in source and binary forms", "redistributions in binary form must reproduce"},
		not: []string{"to endorse or promote products derived from this software", "all advertising materials mentioning"}},
	{id: "Unlicense", all: []string{"this is free and unencumbered software released into the public domain"}},
	{id: "CC0-1.0", all: []string{"cc0 1.0 universal"}},
	{id: "Public-Domain", all: []string{"dedicated to the public domain"}, not: []string{"this is free and unencumbered software"}},
	// The copyleft licenses, by their title lines (each text names the others
	// in passing): named, so a refusal says which.
	{id: "AGPL-3.0", all: []string{"gnu affero general public license version 3, 19 november 2007"}},
	{id: "LGPL-3.0", all: []string{"gnu lesser general public license version 3, 29 june 2007"}},
	{id: "LGPL-2.1", all: []string{"gnu lesser general public license version 2.1, february 1999"}},
	{id: "LGPL-2.0", all: []string{"gnu library general public license version 2, june 1991"}},
	{id: "GPL-3.0", all: []string{"gnu general public license version 3, 29 june 2007"}},
	{id: "GPL-2.0", all: []string{"gnu general public license version 2, june 1991"}},
}

// mentions: a license text that names others in passing (MPL-2.0 lists
// the GPLs as "Secondary Licenses") does not carry them.
var mentions = map[string][]string{
	"MPL-2.0": {"GPL-2.0", "GPL-3.0", "LGPL-2.1", "LGPL-3.0", "AGPL-3.0"},
}

var space = regexp.MustCompile(`[\s*#>/]+`)

// normalize lowercases and folds whitespace and comment leaders, so a text
// wrapped or quoted differently reads the same.
func normalize(text string) string {
	t := strings.ToLower(text)
	t = strings.NewReplacer("\u2018", "'", "\u2019", "'", "\u201c", "\"", "\u201d", "\"").Replace(t)
	return strings.TrimSpace(space.ReplaceAllString(t, " "))
}

// Classify answers the licenses a license file's text holds, sorted; none
// when it holds no text it recognises.
func Classify(text string) []string {
	t := normalize(text)
	found := map[string]bool{}
	for _, m := range markers {
		ok := true
		for _, p := range m.all {
			ok = ok && strings.Contains(t, p)
		}
		for _, p := range m.not {
			ok = ok && !strings.Contains(t, p)
		}
		if ok {
			found[m.id] = true
		}
	}
	for id, named := range mentions {
		if found[id] {
			for _, n := range named {
				delete(found, n)
			}
		}
	}
	var out []string
	for id := range found {
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}
