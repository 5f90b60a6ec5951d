// Command uname is an example poligon Wasm script: the tool vm_uname.
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o uname.wasm .
package main

import "github.com/poligon/poligon/stdlib/go/poligon"

func init() {
	poligon.Register(poligon.Script{
		Name:        "uname",
		Description: "Print the kernel name, release and machine of the VM (uname).",
		Params: []poligon.Param{
			{Name: "flags", Description: "flags for uname", Default: poligon.Str("-a")},
		},
		Run: run,
	})
}

func run(vm *poligon.VM, params map[string]string) (any, error) {
	return vm.Expect("uname " + params["flags"])
}

func main() {}
