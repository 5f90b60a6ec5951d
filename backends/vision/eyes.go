package vision

import (
	"context"
	"fmt"
	"image"

	"github.com/poligon/poligon/backends"
)

// The client as hostapi's eyes see it (hostapi.ElementModel): lists and
// points in backends' words.

// ListElements lists the UI elements on frame.
func (c *Client) ListElements(ctx context.Context, frame *image.RGBA) (backends.ElementList, error) {
	l, err := c.Elements(ctx, frame)
	return backends.ElementList{Elements: l.Elements, Complete: l.Complete, Problem: l.Problem, Took: l.Call.Duration}, err
}

// Point answers where label (of kind, "" for any) is on frame.
func (c *Client) Point(ctx context.Context, frame *image.RGBA, label, kind string) (image.Point, error) {
	p, _, err := c.Ground(ctx, frame, label, kind)
	return p, err
}

// ListKey names what an element list of a w x h frame depends on beside
// its pixels: the model, the prompt and the size the frame is sent at. The
// same for every caller, so a cache keyed by it and the frame's digest
// serves them all.
func (c *Client) ListKey(w, h int) string {
	sw, sh := c.SendSize(w, h)
	return fmt.Sprintf("%s|%d|%dx%d", c.Model(), PromptVersion, sw, sh)
}
