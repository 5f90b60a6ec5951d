//go:build cgo

package fastjpeg

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdlib.h>

// TurboJPEG's API (turbojpeg.h, libjpeg-turbo 2.x), declared here so that
// building needs no headers.
typedef void *tjhandle;
typedef tjhandle (*init_fn)(void);
typedef int (*header3_fn)(tjhandle, const unsigned char *, unsigned long, int *, int *, int *, int *);
typedef int (*decompress2_fn)(tjhandle, const unsigned char *, unsigned long, unsigned char *, int, int, int, int, int);
typedef int (*destroy_fn)(tjhandle);
typedef char *(*errstr_fn)(tjhandle);

enum { TJPF_RGBA = 7 };

static init_fn p_init;
static header3_fn p_header;
static decompress2_fn p_decompress;
static destroy_fn p_destroy;
static errstr_fn p_errstr;

static const char *tj_load(void) {
	void *h = dlopen("libturbojpeg.so.0", RTLD_NOW | RTLD_LOCAL);
	if (!h) return dlerror();
	p_init = (init_fn)dlsym(h, "tjInitDecompress");
	p_header = (header3_fn)dlsym(h, "tjDecompressHeader3");
	p_decompress = (decompress2_fn)dlsym(h, "tjDecompress2");
	p_destroy = (destroy_fn)dlsym(h, "tjDestroy");
	p_errstr = (errstr_fn)dlsym(h, "tjGetErrorStr2");
	if (!p_init || !p_header || !p_decompress || !p_destroy || !p_errstr) return "libturbojpeg.so.0 lacks the TurboJPEG 2 API";
	return NULL;
}

static tjhandle tj_init(void) { return p_init(); }
static void tj_destroy(tjhandle h) { p_destroy(h); }
static const char *tj_error(tjhandle h) { return p_errstr(h); }
static int tj_header(tjhandle h, const unsigned char *b, unsigned long n, int *w, int *ht, int *sub) {
	int cs;
	return p_header(h, b, n, w, ht, sub, &cs);
}
static int tj_decode(tjhandle h, const unsigned char *b, unsigned long n, unsigned char *dst, int w, int pitch, int ht) {
	return p_decompress(h, b, n, dst, w, pitch, ht, TJPF_RGBA, 0);
}
*/
import "C"

import (
	"errors"
	"fmt"
	"image"
	"sync"
	"unsafe"
)

var (
	loadOnce sync.Once
	loadErr  error
)

func native() (bool, error) {
	loadOnce.Do(func() {
		if msg := C.tj_load(); msg != nil {
			loadErr = errors.New(C.GoString(msg))
		}
	})
	return loadErr == nil, loadErr
}

// mcu is TurboJPEG's MCU size per subsampling (tjMCUWidth, tjMCUHeight):
// 4:4:4, 4:2:2, 4:2:0, grey, 4:4:0, 4:1:1.
var mcu = []image.Point{{8, 8}, {16, 8}, {16, 16}, {8, 8}, {8, 16}, {32, 8}}

// decodeNative decodes with libturbojpeg; ok is false where it is missing.
func decodeNative(data []byte) (*image.RGBA, image.Point, bool, error) {
	if ok, _ := native(); !ok || len(data) == 0 {
		return nil, image.Point{}, false, nil
	}
	h := C.tj_init()
	if h == nil {
		return nil, image.Point{}, false, nil
	}
	defer C.tj_destroy(h)
	src := (*C.uchar)(unsafe.Pointer(&data[0]))
	var w, ht, sub C.int
	if C.tj_header(h, src, C.ulong(len(data)), &w, &ht, &sub) != 0 {
		return nil, image.Point{}, true, fmt.Errorf("jpeg: %s", C.GoString(C.tj_error(h)))
	}
	if w <= 0 || ht <= 0 || int(w)*int(ht) > 1<<26 {
		return nil, image.Point{}, true, fmt.Errorf("jpeg: a %dx%d image", w, ht)
	}
	img := image.NewRGBA(image.Rect(0, 0, int(w), int(ht)))
	if C.tj_decode(h, src, C.ulong(len(data)), (*C.uchar)(unsafe.Pointer(&img.Pix[0])), w, C.int(img.Stride), ht) != 0 {
		return nil, image.Point{}, true, fmt.Errorf("jpeg: %s", C.GoString(C.tj_error(h)))
	}
	block := image.Pt(8, 8)
	if s := int(sub); s >= 0 && s < len(mcu) {
		block = mcu[s]
	}
	return img, block, true, nil
}
