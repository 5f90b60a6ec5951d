package main

import (
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// outboundCAs counts the CA certificates SSL_CERT_FILE and SSL_CERT_DIR
// give outbound TLS (Proxmox, physical benches, model endpoints). Set,
// they replace the system store for Go's crypto/x509 and for the Proxmox
// backend, so an empty certs volume would fail every call later with
// "unknown authority"; unset (source ""), the system store serves.
func outboundCAs(getenv func(string) string) (n int, source string, err error) {
	file, dirs := getenv("SSL_CERT_FILE"), getenv("SSL_CERT_DIR")
	var names []string
	if file != "" {
		names = append(names, "SSL_CERT_FILE="+file)
		data, err := os.ReadFile(file)
		if err != nil {
			return 0, strings.Join(names, " and "), fmt.Errorf("reading SSL_CERT_FILE: %w", err)
		}
		n += countCerts(data)
	}
	if dirs != "" {
		names = append(names, "SSL_CERT_DIR="+dirs)
		for _, dir := range filepath.SplitList(dirs) {
			entries, err := os.ReadDir(dir)
			if err != nil {
				return 0, strings.Join(names, " and "), fmt.Errorf("reading SSL_CERT_DIR: %w", err)
			}
			for _, e := range entries {
				if data, err := os.ReadFile(filepath.Join(dir, e.Name())); err == nil && !e.IsDir() {
					n += countCerts(data)
				}
			}
		}
	}
	source = strings.Join(names, " and ")
	if source != "" && n > 0 {
		// What crypto/x509 itself makes of the same variables.
		if _, err := x509.SystemCertPool(); err != nil {
			return n, source, err
		}
	}
	return n, source, nil
}

// countCerts counts the certificates that parse in PEM data.
func countCerts(data []byte) int {
	n := 0
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			return n
		}
		if block.Type == "CERTIFICATE" {
			if _, err := x509.ParseCertificate(block.Bytes); err == nil {
				n++
			}
		}
	}
}

// caProblem answers why outbound TLS would trust nothing, "" when it can
// verify servers.
func caProblem(getenv func(string) string) string {
	n, source, err := outboundCAs(getenv)
	switch {
	case err != nil:
		return fmt.Sprintf("outbound TLS: no CA certificates were loaded from %s: %v", source, err)
	case source != "" && n == 0:
		return "outbound TLS: no CA certificates were loaded from " + source
	}
	return ""
}

const caHint = "put the PEM certificate of the CA that signs your Proxmox API, benches and model endpoints into that directory " +
	"(the image's certs volume, /etc/poligon/certs), or unset the variable to use the system store"

// requireOutboundCAs refuses a start whose outbound TLS would trust nothing.
func requireOutboundCAs(stderr io.Writer) error {
	if p := caProblem(os.Getenv); p != "" {
		fmt.Fprintf(stderr, "error: %s\nhint: %s\n", p, caHint)
		return exitError(2)
	}
	return nil
}
