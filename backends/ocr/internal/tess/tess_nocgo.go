//go:build !cgo

package tess

import "fmt"

// Version answers that this build cannot load the library.
func Version() (string, error) { return "", errNoCgo }

// Find answers that this build cannot load the library.
func Find() error { return errNoCgo }

// Loaded is always false: this build cannot load the library.
func Loaded() bool { return false }

var errNoCgo = fmt.Errorf("%w: this poligon was built without cgo (CGO_ENABLED=0), so it cannot load %s; use a build with cgo", ErrUnavailable, Library)

// API is one tesseract engine; without cgo there is none.
type API struct{}

// New answers that this build cannot load the library.
func New(dir, langs string) (*API, error) { return nil, errNoCgo }

// Set is never reached: New fails.
func (api *API) Set(name, value string) error { return errNoCgo }

// Read is never reached: New fails.
func (api *API) Read(gray []byte, w, h, psm int) (string, error) { return "", errNoCgo }

// Close does nothing.
func (api *API) Close() {}

// Page segmentation modes, as in the cgo build.
const (
	PSMBlock     = 6
	PSMLine      = 7
	PSMSparse    = 11
	PSMRawLine   = 13
	PSMWord      = 8
	PSMAutoNoOSD = 3
)
