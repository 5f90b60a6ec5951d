//go:build cgo

package tess

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdlib.h>

// The C API's types and functions, declared here so that building needs
// no tesseract headers. Where libtesseract-dev is installed, the checks
// below hold these to tesseract/capi.h.
typedef struct TessBaseAPI TessBaseAPI;
typedef TessBaseAPI *(*create_fn)(void);
typedef void (*delete_fn)(TessBaseAPI *);
typedef int (*init3_fn)(TessBaseAPI *, const char *, const char *);
typedef int (*setvar_fn)(TessBaseAPI *, const char *, const char *);
typedef void (*setpsm_fn)(TessBaseAPI *, int);
typedef void (*setimage_fn)(TessBaseAPI *, const unsigned char *, int, int, int, int);
typedef void (*setres_fn)(TessBaseAPI *, int);
typedef int (*recognize_fn)(TessBaseAPI *, void *);
typedef char *(*tsv_fn)(TessBaseAPI *, int);
typedef void (*deltext_fn)(const char *);
typedef const char *(*version_fn)(void);

#if __has_include(<tesseract/capi.h>)
#include <tesseract/capi.h>
_Static_assert(__builtin_types_compatible_p(__typeof__(&TessBaseAPIInit3), init3_fn), "TessBaseAPIInit3");
_Static_assert(__builtin_types_compatible_p(__typeof__(&TessBaseAPISetImage), setimage_fn), "TessBaseAPISetImage");
_Static_assert(__builtin_types_compatible_p(__typeof__(&TessBaseAPIGetTsvText), tsv_fn), "TessBaseAPIGetTsvText");
_Static_assert(__builtin_types_compatible_p(__typeof__(&TessBaseAPISetSourceResolution), setres_fn), "TessBaseAPISetSourceResolution");
#endif

static create_fn p_create;
static delete_fn p_delete, p_end;
static init3_fn p_init3;
static setvar_fn p_setvar;
static setpsm_fn p_setpsm;
static setimage_fn p_setimage;
static setres_fn p_setres;
static recognize_fn p_recognize;
static tsv_fn p_tsv;
static deltext_fn p_deltext;
static version_fn p_version;

// load opens the library and finds every function; it answers NULL or
// what failed (dlerror's text, or the missing symbol).
static const char *load(const char *lib) {
	void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
	if (!h) return dlerror();
#define SYM(var, name) if (!(*(void **)&var = dlsym(h, name))) return name;
	SYM(p_create, "TessBaseAPICreate")
	SYM(p_delete, "TessBaseAPIDelete")
	SYM(p_end, "TessBaseAPIEnd")
	SYM(p_init3, "TessBaseAPIInit3")
	SYM(p_setvar, "TessBaseAPISetVariable")
	SYM(p_setpsm, "TessBaseAPISetPageSegMode")
	SYM(p_setimage, "TessBaseAPISetImage")
	SYM(p_setres, "TessBaseAPISetSourceResolution")
	SYM(p_recognize, "TessBaseAPIRecognize")
	SYM(p_tsv, "TessBaseAPIGetTsvText")
	SYM(p_deltext, "TessDeleteText")
	SYM(p_version, "TessVersion")
#undef SYM
	return NULL;
}

static TessBaseAPI *t_create(void) { return p_create(); }
static void t_free(TessBaseAPI *a) { p_end(a); p_delete(a); }
static int t_init(TessBaseAPI *a, const char *dir, const char *langs) { return p_init3(a, dir, langs); }
static int t_setvar(TessBaseAPI *a, const char *k, const char *v) { return p_setvar(a, k, v); }
static const char *t_version(void) { return p_version(); }

// t_read recognises one 8-bit gray image with a page segmentation mode and
// answers tesseract's TSV (free it with t_deltext), or NULL.
static char *t_read(TessBaseAPI *a, const unsigned char *pix, int w, int h, int psm) {
	p_setpsm(a, psm);
	p_setimage(a, pix, w, h, 1, w);  // tesseract copies the pixels
	p_setres(a, 96);                 // screens have no DPI; silences its guess
	if (p_recognize(a, NULL) != 0) return NULL;
	return p_tsv(a, 0);
}
static void t_deltext(char *s) { p_deltext(s); }
*/
import "C"

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"unsafe"
)

var (
	loadOnce sync.Once
	loadErr  error
	loaded   atomic.Bool // load has run: loadErr is its answer
)

// load opens the library once per process, after making sure libgomp will
// see OMP_THREAD_LIMIT (the caller's own value stands).
func load() error {
	loadOnce.Do(func() {
		defer loaded.Store(true)
		if os.Getenv("OMP_THREAD_LIMIT") == "" {
			os.Setenv("OMP_THREAD_LIMIT", "1") // cgo: reaches the C environment
		}
		lib := C.CString(Library)
		defer C.free(unsafe.Pointer(lib))
		if msg := C.load(lib); msg != nil {
			loadErr = fmt.Errorf("%w: cannot load %s: %s (install libtesseract5 and tesseract-ocr)", ErrUnavailable, Library, C.GoString(msg))
		}
	})
	return loadErr
}

// Find answers whether the library can be had, without loading it: once
// it has been loaded (or failed to), what that answered; before, whether
// its file is where the loader looks.
func Find() error {
	if loaded.Load() {
		return loadErr
	}
	return findLibrary()
}

// Loaded reports whether this process has loaded the library.
func Loaded() bool { return loaded.Load() && loadErr == nil }

// Version answers the library's version, loading it.
func Version() (string, error) {
	if err := load(); err != nil {
		return "", err
	}
	return C.GoString(C.t_version()), nil
}

// API is one tesseract engine. It is not safe for concurrent use: each
// worker owns one.
type API struct{ a *C.TessBaseAPI }

// New loads the library (once) and makes an engine for langs ("rus+eng")
// with the data in dir.
func New(dir, langs string) (*API, error) {
	if err := CheckLanguages(dir, langs); err != nil {
		return nil, err
	}
	if err := load(); err != nil {
		return nil, err
	}
	a := C.t_create()
	if a == nil {
		return nil, errors.New("tesseract: TessBaseAPICreate failed")
	}
	cdir, clangs := C.CString(dir), C.CString(langs)
	defer C.free(unsafe.Pointer(cdir))
	defer C.free(unsafe.Pointer(clangs))
	if C.t_init(a, cdir, clangs) != 0 {
		C.t_free(a)
		return nil, fmt.Errorf("%w: tesseract cannot initialise %s from %s", ErrUnavailable, langs, dir)
	}
	api := &API{a: a}
	// Its diagnostics ("Estimating resolution", "Empty page") are noise on
	// a server's stderr.
	if err := api.Set("debug_file", "/dev/null"); err != nil {
		api.Close()
		return nil, err
	}
	return api, nil
}

// Set sets a tesseract variable.
func (api *API) Set(name, value string) error {
	cn, cv := C.CString(name), C.CString(value)
	defer C.free(unsafe.Pointer(cn))
	defer C.free(unsafe.Pointer(cv))
	if C.t_setvar(api.a, cn, cv) == 0 {
		return fmt.Errorf("tesseract: cannot set %s=%s", name, value)
	}
	return nil
}

// Page segmentation modes used here.
const (
	PSMBlock     = 6  // one uniform block of text
	PSMLine      = 7  // one text line
	PSMSparse    = 11 // as much text as possible, in no order
	PSMRawLine   = 13 // one line, bypassing tesseract's own layout
	PSMWord      = 8
	PSMAutoNoOSD = 3
)

// Read recognises a w x h 8-bit gray image and answers tesseract's TSV
// rows (no header).
func (api *API) Read(gray []byte, w, h, psm int) (string, error) {
	if w <= 0 || h <= 0 || len(gray) < w*h {
		return "", fmt.Errorf("tesseract: bad image %dx%d (%d bytes)", w, h, len(gray))
	}
	out := C.t_read(api.a, (*C.uchar)(unsafe.Pointer(&gray[0])), C.int(w), C.int(h), C.int(psm))
	if out == nil {
		return "", errors.New("tesseract: recognition failed")
	}
	defer C.t_deltext(out)
	return C.GoString(out), nil
}

// Close ends the engine (without End tesseract warns of leaks at exit).
func (api *API) Close() {
	if api.a != nil {
		C.t_free(api.a)
		api.a = nil
	}
}
