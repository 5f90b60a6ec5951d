// Package recipes holds the recipes poligon ships: scripts with tool: false,
// callable from scripts and stand plans only. They are embedded in the
// binary.
package recipes

import "embed"

// FS holds the shipped recipes.
//
//go:embed *.js
var FS embed.FS
