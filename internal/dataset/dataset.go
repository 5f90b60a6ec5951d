// Package dataset is the training-dataset capture's on-disk format and its
// exporter: every console frame the server captures may be saved as a
// full-size PNG with what the guest's accessibility tree (AT-SPI) and OCR
// said was on it, one index.jsonl line per shot, and the exporter turns
// such a capture into a clean training set that never leaks the
// evaluation benchmark.
//
// A capture directory holds
//
//	index.jsonl                                  one Line per shot
//	<backend>-<bench>-vm<vmid>-<owner>-<day>/    one session: a cluster, bench, machine, caller and day
//	    <agent>-shot-NNNN.png                    the full frame, never scaled
//	    <agent>-shot-NNNN.atspi.json             the AT-SPI dump (a Dump), when one was read
//	    <agent>-shot-NNNN.ocr.tsv                the OCR words (x y w h text conf), when OCR ran
//
// The package is a leaf: the capture code in hostapi calls a Writer, the
// dataset_status tool calls StatusOf, `poligon dataset export` calls Export.
package dataset

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// IndexName is the index file at the top of a capture directory.
const IndexName = "index.jsonl"

// The suffixes of a shot's three files.
const (
	PNGSuffix   = ".png"
	ATSPISuffix = ".atspi.json"
	OCRSuffix   = ".ocr.tsv"
)

// HardScreenTarget is the share of shots showing a tree, toolbar, list or
// table the capture aims for: the benchmark's main recall gap.
const HardScreenTarget = 0.30

// DefaultMinFreeMB is the free-space floor below which capture stops.
const DefaultMinFreeMB = 2048

// Error is a refusal the user should read: what is wrong and, as Hint, what
// to do instead. It satisfies backends.Hinted, so the tools show the hint
// without this package importing them.
type Error struct {
	Message string
	Advice  string
}

func (e *Error) Error() string { return e.Message }

// Hint says what to do about the error.
func (e *Error) Hint() string { return e.Advice }

func failf(hint, format string, args ...any) *Error {
	return &Error{Message: fmt.Sprintf(format, args...), Advice: hint}
}

// BackendID names a cluster in a session directory: the first 8 hex digits
// of its endpoint's SHA-256, so the same owner and vmid on two clusters
// cannot share a directory and the endpoint itself is not written down.
func BackendID(endpoint string) string {
	sum := sha256.Sum256([]byte(endpoint))
	return hex.EncodeToString(sum[:4])
}

// SessionName is the directory one cluster, bench, machine, caller and day
// capture into, <backend>-<bench>-vm<vmid>-<owner>-<YYYY-MM-DD>; it is also
// the index's session. Characters a file name should not carry become _.
func SessionName(backend, bench string, vmid int, owner string, day time.Time) string {
	return fmt.Sprintf("%s-%s-vm%d-%s-%s", safeName(backend), safeName(bench), vmid, safeName(owner), day.Format("2006-01-02"))
}

// ShotName is the n-th frame file of an agent, <agent>-shot-NNNN.png.
func ShotName(agent string, n int) string {
	return fmt.Sprintf("%s-shot-%04d%s", agent, n, PNGSuffix)
}

// ATSPIName and OCRName are the sidecars of a shot file (name or path).
func ATSPIName(shot string) string { return strings.TrimSuffix(shot, PNGSuffix) + ATSPISuffix }

// OCRName: see ATSPIName.
func OCRName(shot string) string { return strings.TrimSuffix(shot, PNGSuffix) + OCRSuffix }

// shotNumber answers NNNN of <agent>-shot-NNNN.png, or false for another file.
func shotNumber(name, agent string) (int, bool) {
	rest, ok := strings.CutPrefix(name, agent+"-shot-")
	if !ok {
		return 0, false
	}
	digits, ok := strings.CutSuffix(rest, PNGSuffix)
	if !ok || digits == "" || strings.Trim(digits, "0123456789") != "" {
		return 0, false
	}
	n, err := strconv.Atoi(digits)
	return n, err == nil
}

// ValidName says whether s may be a session directory or an agent: one
// path component of letters, digits, '.', '_' and '-', not starting with a
// dot (so neither "." nor ".." nor a hidden file).
func ValidName(s string) bool {
	if s == "" || s[0] == '.' || len(s) > 200 {
		return false
	}
	return safeName(s) == s
}

// SafeName makes s a valid name (an agent, a session part): what ValidName
// refuses becomes _.
func SafeName(s string) string { return safeName(s) }

// safeName replaces what ValidName refuses with _.
func safeName(s string) string {
	if s == "" {
		return "_"
	}
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			b[i] = '_'
		}
	}
	if b[0] == '.' {
		b[0] = '_'
	}
	return string(b)
}

// NormalizeLocale reduces a locale to its language, lower case: ru_RU.UTF-8,
// ru_RU, ru-RU and ru are all "ru", so one language is one row of every
// count whether a guest probe or a caller named it. C and POSIX stay as
// they are.
func NormalizeLocale(raw string) string {
	s := strings.TrimSpace(raw)
	if i := strings.IndexAny(s, ".@"); i >= 0 {
		s = s[:i]
	}
	if i := strings.IndexAny(s, "_-"); i >= 0 {
		s = s[:i]
	}
	if s == "C" || s == "POSIX" {
		return s
	}
	return strings.ToLower(s)
}
