package poligon

import (
	"encoding/json"
	"time"
)

// Script is what a Wasm script declares about itself and its entry point.
// Its fields mirror runtime.Manifest.
type Script struct {
	Name        string // ^[a-z][a-z0-9_]*$; a tool becomes vm_<name>
	Description string
	Params      []Param // in declaration order
	// Recipe true makes the script a recipe, callable from scripts and stand
	// plans only; false (the zero value) makes it the tool vm_<name>, as a
	// JS script without tool: false is.
	Recipe  bool
	Timeout time.Duration // time limit of one run; default 10m (0 leaves it to the host)
	// Recipes lists the recipes Run calls, for load-time validation.
	Recipes []RecipeCall
	// Run answers the run's result: a string becomes the tool's text,
	// a calls.ShotAnswer an image, anything else JSON.
	Run func(vm *VM, params map[string]string) (any, error)
}

// Param is one script parameter. Every parameter is a string; one without a
// default is required.
type Param struct {
	Name        string  `json:"name"`
	Description string  `json:"description,omitempty"`
	Default     *string `json:"default,omitempty"`
}

// RecipeCall names a recipe the script calls and the params it passes.
type RecipeCall struct {
	Name   string   `json:"name"`
	Params []string `json:"params"`
}

// Str answers a pointer to s, for Param.Default.
func Str(s string) *string { return &s }

// registered is the script of this module, set by Register in init.
var registered *Script

// Register declares the module's script. Call it once, from init.
func Register(s Script) {
	if registered != nil {
		panic("poligon: Register called twice; a module holds one script")
	}
	registered = &s
}

// manifest is the JSON shape of runtime.Manifest.
type manifest struct {
	Name        string        `json:"name"`
	Description string        `json:"description"`
	Params      []Param       `json:"params"`
	Tool        bool          `json:"tool"`
	Timeout     time.Duration `json:"timeout,omitempty"` // nanoseconds, as time.Duration marshals
	Recipes     []RecipeCall  `json:"recipes,omitempty"`
}

// manifestEnvelope answers the registered script's manifest as an answer
// envelope.
func manifestEnvelope() []byte {
	s := registered
	if s == nil {
		return errorEnvelope(&Error{Message: "the module registers no script: call poligon.Register in an init function"})
	}
	if s.Run == nil {
		return errorEnvelope(&Error{Message: "script " + s.Name + " has no Run function"})
	}
	params := s.Params
	if params == nil {
		params = []Param{}
	}
	return valueEnvelope(manifest{
		Name: s.Name, Description: s.Description, Params: params,
		Tool: !s.Recipe, Timeout: s.Timeout, Recipes: s.Recipes,
	})
}

// runEnvelope runs the registered script with the params JSON and answers
// its result or error as an answer envelope. A panic in Run is its error.
func runEnvelope(paramsJSON []byte, vmid int, call Caller) (answer []byte) {
	s := registered
	if s == nil || s.Run == nil {
		return errorEnvelope(&Error{Message: "the module registers no script with a Run function"})
	}
	var params map[string]string
	if err := json.Unmarshal(paramsJSON, &params); err != nil {
		return errorEnvelope(&Error{Message: "decode params: " + err.Error()})
	}
	if params == nil {
		params = map[string]string{}
	}
	defer func() {
		if p := recover(); p != nil {
			answer = bodyEnvelope(panicBody(p))
		}
	}()
	value, err := s.Run(NewVM(vmid, call), params)
	if err != nil {
		return errorEnvelope(err)
	}
	return valueEnvelope(value)
}
