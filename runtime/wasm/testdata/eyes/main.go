// Command eyes is a Wasm script that reads the screen: it waits for a text
// and clicks a label, as the JS test script does (engine/eyes_test.go).
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o eyes.wasm .
package main

import (
	"fmt"

	"github.com/poligon/poligon/stdlib/go/poligon"
)

func init() {
	poligon.Register(poligon.Script{
		Name:        "eyes_wasm",
		Description: "Wait for a text on screen, then click a label (OCR).",
		Params: []poligon.Param{
			{Name: "wait", Description: "the text to wait for"},
			{Name: "click", Description: "the label to click"},
		},
		Run: run,
	})
}

func run(vm *poligon.VM, params map[string]string) (any, error) {
	seen, err := vm.Screen().WaitText(params["wait"], poligon.WaitTextOpts{Timeout: 30})
	if err != nil {
		return nil, err
	}
	if !seen.OK {
		return nil, fmt.Errorf("%q did not show in %.0f s", params["wait"], seen.Seconds)
	}
	c, err := vm.Mouse().ClickLabel(params["click"])
	if err != nil {
		return nil, err
	}
	return fmt.Sprintf("%s %d,%d", c.Source, c.X, c.Y), nil
}

func main() {}
