package poligon

// SaveShot is written by hand (GoByHand in hostapi/calls.Registry): it takes
// a shot rather than its image handle and answers the path alone.

import "github.com/poligon/poligon/hostapi/calls"

// SaveShot saves a screenshot (shot, or a fresh one) as a PNG under the
// evidence directory and answers the path written, relative to it.
func (vm *VM) SaveShot(path string, shot ...calls.ShotAnswer) (string, error) {
	var answer calls.SaveShotAnswer
	err := vm.Call(calls.SaveShot, calls.SaveShotArgs{Path: path, Image: firstOf(shot).Image}, &answer)
	return answer.Path, err
}
