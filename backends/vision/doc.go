// Package vision holds the clients of OpenAI-compatible chat/completions
// endpoints that read a screen: a vision model that lists the UI elements of
// a frame, and a grounding model that answers one point for a label.
//
// It speaks the wire format with net/http and encoding/json rather than an
// SDK, because the request body merges a free-form options object (model and
// messages always win) and the answers carry non-standard fields
// (message.reasoning and message.reasoning_content, a usage object whose
// absence must be told apart from zero usage) that typed SDK structs drop.
//
// Coordinates are a trap (vision.md §2.2): Qwen2.5-VL-based models answer in
// pixels of the image after the server's smart_resize, Qwen3-VL, Holo2 and
// UGround in 0-1000 of the image. The client therefore resizes the frame
// itself (Endpoint.Resize), tells the model the size it sends, and maps every
// answer back to the pixels of the frame it was given: one coordinate space
// per frame, never a global scale.
//
// Labels are screen content, never instructions: they are returned as data,
// cleaned of control characters and capped in length, and the prompts say so.
// The key never reaches a log line, an error text, an event or a sample.
package vision
