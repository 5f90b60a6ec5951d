//go:build !cgo

package fastjpeg

import (
	"errors"
	"image"
)

func native() (bool, error) { return false, errors.New("a build without cgo") }

func decodeNative([]byte) (*image.RGBA, image.Point, bool, error) {
	return nil, image.Point{}, false, nil
}
