package kvmdtest

import (
	"crypto/hmac"
	"crypto/sha1"
	"encoding/base32"
	"encoding/binary"
	"fmt"
	"strings"
	"time"
)

// totpAt is pyotp's TOTP.at: RFC 6238 with SHA-1, 30 s steps, 6 digits,
// over a base32 secret.
func totpAt(secret string, t time.Time) (string, error) {
	s := strings.ToUpper(strings.ReplaceAll(secret, " ", ""))
	key, err := base32.StdEncoding.WithPadding(base32.NoPadding).DecodeString(strings.TrimRight(s, "="))
	if err != nil {
		return "", err
	}
	var msg [8]byte
	binary.BigEndian.PutUint64(msg[:], uint64(t.Unix()/30))
	m := hmac.New(sha1.New, key)
	m.Write(msg[:])
	sum := m.Sum(nil)
	off := sum[len(sum)-1] & 0x0f
	code := binary.BigEndian.Uint32(sum[off:off+4]) & 0x7fffffff
	return fmt.Sprintf("%06d", code%1000000), nil
}

// totpVerify is pyotp's verify(code, valid_window=1): the current step or
// one either side.
func totpVerify(secret, code string, now time.Time) bool {
	for _, d := range []time.Duration{0, -30 * time.Second, 30 * time.Second} {
		if c, err := totpAt(secret, now.Add(d)); err == nil && hmac.Equal([]byte(c), []byte(code)) {
			return true
		}
	}
	return false
}

// TOTP answers the current code for secret, for tests that log in by hand.
func TOTP(secret string) (string, error) { return totpAt(secret, time.Now()) }
