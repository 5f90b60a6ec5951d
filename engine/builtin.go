package engine

// builtinTools lists every built-in tool, family by family.
func builtinTools() []*Tool {
	var all []*Tool
	for _, family := range [][]*Tool{vmTools(), guestTools(), isoTools(), uiTools(), eyesTools(), benchTools(), standTools(), traceTools(), datasetTools()} {
		all = append(all, family...)
	}
	return all
}
