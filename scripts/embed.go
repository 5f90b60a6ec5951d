// Package scripts holds the tool scripts poligon ships: each file becomes
// the MCP tool vm_<name>. They are embedded in the binary.
package scripts

import "embed"

// FS holds the shipped tool scripts.
//
//go:embed *.js
var FS embed.FS
