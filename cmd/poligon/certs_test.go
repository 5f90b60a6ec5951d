package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/poligon/poligon/internal/testvm"
)

// testCA writes a self-signed CA certificate as PEM into dir/name.
func testCA(t *testing.T, dir, name string) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "poligon test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func envOf(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

func TestOutboundCAs(t *testing.T) {
	empty := t.TempDir()
	withCA := t.TempDir()
	testCA(t, withCA, "lab-ca.pem")
	os.WriteFile(filepath.Join(withCA, "README"), []byte("not a certificate"), 0o644)
	junk := t.TempDir()
	os.WriteFile(filepath.Join(junk, "ca.pem"), []byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"), 0o644)

	for _, c := range []struct {
		name string
		env  map[string]string
		want string // "" = no problem
	}{
		{"unset: the system store", nil, ""},
		{"a dir with a CA", map[string]string{"SSL_CERT_DIR": withCA}, ""},
		{"a CA file", map[string]string{"SSL_CERT_FILE": filepath.Join(withCA, "lab-ca.pem")}, ""},
		{"an empty dir", map[string]string{"SSL_CERT_DIR": empty}, "no CA certificates were loaded from SSL_CERT_DIR=" + empty},
		{"a dir of junk", map[string]string{"SSL_CERT_DIR": junk}, "no CA certificates were loaded from SSL_CERT_DIR=" + junk},
		{"a missing dir", map[string]string{"SSL_CERT_DIR": filepath.Join(empty, "gone")}, "reading SSL_CERT_DIR"},
		{"a missing file", map[string]string{"SSL_CERT_FILE": filepath.Join(empty, "ca.pem")}, "reading SSL_CERT_FILE"},
		{"both, neither loads", map[string]string{"SSL_CERT_FILE": filepath.Join(junk, "ca.pem"), "SSL_CERT_DIR": empty},
			"from SSL_CERT_FILE=" + filepath.Join(junk, "ca.pem") + " and SSL_CERT_DIR=" + empty},
		{"one of two dirs has a CA", map[string]string{"SSL_CERT_DIR": empty + ":" + withCA}, ""},
	} {
		got := caProblem(envOf(c.env))
		if c.want == "" && got != "" || c.want != "" && !strings.Contains(got, c.want) {
			t.Errorf("%s: problem %q, want %q", c.name, got, c.want)
		}
	}
}

// TestServeRefusesWithoutCAs: the container's start with an empty certs volume.
func TestServeRefusesWithoutCAs(t *testing.T) {
	certs := t.TempDir()
	var e []string
	for _, kv := range env(t, testvm.ShortTempDir(t)) {
		if !strings.HasPrefix(kv, "SSL_CERT_") {
			e = append(e, kv)
		}
	}
	e = append(e, "SSL_CERT_DIR="+certs)
	_, errOut, code := poligon(t, e, "serve", "--bind", "127.0.0.1:0")
	want := "error: outbound TLS: no CA certificates were loaded from SSL_CERT_DIR=" + certs + "\nhint: "
	if code != 2 || !strings.HasPrefix(errOut, want) {
		t.Errorf("serve with an empty SSL_CERT_DIR: exit %d, %q; want exit 2 and %q", code, errOut, want)
	}
}
