package pikvm

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
)

// PinError is a TLS handshake refused because the server's certificate is
// not the pinned one.
type PinError struct {
	Host      string
	Pinned    []byte // SHA-256 of the expected certificate
	Presented []byte // SHA-256 of the certificate the server sent
}

func (e *PinError) Error() string {
	return fmt.Sprintf("the TLS certificate of %s does not match the pinned SHA-256: pinned %s, presented %s",
		e.Host, fingerprintStart(e.Pinned), fingerprintStart(e.Presented))
}

// Hint says what to check before changing the pin.
func (e *PinError) Hint() string {
	return "the PiKVM's certificate changed (regenerated, or replaced) or this is not your PiKVM: read the fingerprint on the device " +
		"(openssl x509 -noout -fingerprint -sha256 -in /etc/kvmd/nginx/ssl/server.crt) before the operator updates the bench's pin"
}

// fingerprintStart shows the first 8 bytes of a fingerprint, colon-separated.
func fingerprintStart(sum []byte) string {
	n := min(len(sum), 8)
	parts := make([]string, n)
	for i := range n {
		parts[i] = hex.EncodeToString(sum[i : i+1])
	}
	return strings.Join(parts, ":") + "…"
}

// parsePin reads a SHA-256 fingerprint in hex, with or without colons (as
// openssl prints it) or spaces.
func parsePin(pin string) ([]byte, error) {
	clean := strings.NewReplacer(":", "", " ", "", "-", "").Replace(strings.TrimSpace(pin))
	sum, err := hex.DecodeString(clean)
	if err != nil || len(sum) != sha256.Size {
		return nil, errors.New("the certificate pin is not a SHA-256 fingerprint (64 hex digits, colons allowed)")
	}
	return sum, nil
}

// tlsConfig builds the client's TLS: the CA file's roots (else the
// system's), and with a pin the leaf certificate's SHA-256 must match. A
// pin alone replaces chain verification (a PiKVM's certificate is usually
// self-signed); it is never skipped otherwise. It answers what it trusts,
// for messages.
func tlsConfig(host, caFile, pin string) (*tls.Config, string, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	trust := "the system trust store"
	if caFile != "" {
		data, err := os.ReadFile(caFile)
		if err != nil {
			return nil, "", fmt.Errorf("reading the CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(data) {
			return nil, "", fmt.Errorf("the CA file %s holds no PEM certificate", caFile)
		}
		cfg.RootCAs = pool
		trust = "the CA file " + caFile
	}
	if pin == "" {
		return cfg, trust, nil
	}
	want, err := parsePin(pin)
	if err != nil {
		return nil, "", err
	}
	if caFile == "" {
		// The pin is the trust: the chain is not checked, the leaf is.
		cfg.InsecureSkipVerify = true
		trust = "the pinned certificate"
	} else {
		trust += " and the pinned certificate"
	}
	cfg.VerifyConnection = func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return &PinError{Host: host, Pinned: want}
		}
		got := sha256.Sum256(cs.PeerCertificates[0].Raw)
		if !equalBytes(got[:], want) {
			return &PinError{Host: host, Pinned: want, Presented: got[:]}
		}
		return nil
	}
	return cfg, trust, nil
}

func equalBytes(a, b []byte) bool {
	if len(a) != len(b) {
		return false
	}
	var d byte
	for i := range a {
		d |= a[i] ^ b[i]
	}
	return d == 0
}

// certProblem finds a certificate verification failure in err, and the
// certificate the server presented when it is known.
func certProblem(err error) (error, *x509.Certificate) {
	var verify *tls.CertificateVerificationError
	var unknown x509.UnknownAuthorityError
	var host x509.HostnameError
	var invalid x509.CertificateInvalidError
	switch {
	case errors.As(err, &verify):
		var leaf *x509.Certificate
		if len(verify.UnverifiedCertificates) > 0 {
			leaf = verify.UnverifiedCertificates[0]
		}
		return verify.Err, leaf
	case errors.As(err, &unknown):
		return unknown, unknown.Cert
	case errors.As(err, &host):
		return host, host.Certificate
	case errors.As(err, &invalid):
		return invalid, invalid.Cert
	}
	return nil, nil
}

func sha256Sum(der []byte) []byte {
	s := sha256.Sum256(der)
	return s[:]
}
