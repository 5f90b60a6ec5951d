package pikvm

import (
	"crypto/hmac"
	"crypto/sha1"
	"encoding/base32"
	"encoding/binary"
	"fmt"
	"strings"
	"time"
)

// totpKey decodes a base32 TOTP secret as authenticator apps show it:
// any case, spaces and padding optional.
func totpKey(secret string) ([]byte, error) {
	s := strings.ToUpper(strings.Join(strings.Fields(secret), ""))
	key, err := base32.StdEncoding.WithPadding(base32.NoPadding).DecodeString(strings.TrimRight(s, "="))
	if err != nil || len(key) == 0 {
		return nil, fmt.Errorf("the TOTP secret is not base32 (the text kvmd-totp shows, or the secret= of its otpauth:// link)")
	}
	return key, nil
}

// totpCode is RFC 6238 TOTP as kvmd (pyotp) checks it: HMAC-SHA1 over the
// 30-second step count since the epoch, dynamically truncated, 6 digits.
func totpCode(key []byte, t time.Time) string {
	var step [8]byte
	binary.BigEndian.PutUint64(step[:], uint64(t.Unix()/30))
	m := hmac.New(sha1.New, key)
	m.Write(step[:])
	sum := m.Sum(nil)
	off := sum[len(sum)-1] & 0x0f
	n := binary.BigEndian.Uint32(sum[off:off+4]) & 0x7fffffff
	return fmt.Sprintf("%06d", n%1000000)
}
