package pve

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestOwnerFromTokenID(t *testing.T) {
	cases := []struct {
		id, owner string
	}{
		{"user@pve!repro", "user"},
		{"Ivan.Petrov@ad!tok", "ivanpetrov"},
		{"a.b@pve!x", "ab"},
		{"ab@pam!x", "ab"},
		{"QA_Team-7@ldap!ci", "qateam7"},
		{"Ёлка99@pve!t", "99"},
	}
	for _, c := range cases {
		got, err := OwnerFromTokenID(c.id)
		if err != nil || got != c.owner {
			t.Errorf("OwnerFromTokenID(%q) = %q, %v; want %q", c.id, got, err, c.owner)
		}
	}
	for _, id := range []string{"...@pve!x", "Ёлка@pve!t", "@pve!x"} {
		if _, err := OwnerFromTokenID(id); !errors.Is(err, ErrNoOwner) || !strings.Contains(err.Error(), "cannot derive owner from token id") {
			t.Errorf("OwnerFromTokenID(%q) = %v; want ErrNoOwner", id, err)
		}
	}
}

func TestNewRefusesBadConfiguration(t *testing.T) {
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	const secret = "0b1c2d3e-aaaa-bbbb-cccc-topsecretvalue"
	good := "alice@pve!repro=" + secret
	cases := []struct {
		name string
		cfg  Config
		want string
	}{
		{"no secret separator", Config{URL: "https://pve:8006", Token: "alice@pve!repro"}, "USER@REALM!TOKENID=SECRET"},
		{"empty secret", Config{URL: "https://pve:8006", Token: "alice@pve!repro="}, "secret"},
		{"no token name", Config{URL: "https://pve:8006", Token: "alice@pve=" + secret}, "!TOKENID"},
		{"no realm", Config{URL: "https://pve:8006", Token: "alice!repro=" + secret}, "USER@REALM"},
		{"owner from nothing", Config{URL: "https://pve:8006", Token: "..@pve!x=" + secret}, "cannot derive owner from token id"},
		{"http", Config{URL: "http://pve:8006", Token: good}, "https"},
		{"no host", Config{URL: "pve:8006", Token: good}, "want https://host:8006"},
		{"odd path", Config{URL: "https://pve:8006/ui", Token: good}, "unexpected path"},
		{"missing CA", Config{URL: "https://pve:8006", Token: good, CAFile: "/nonexistent/ca.pem"}, "reading the CA file"},
		{"CA without certificates", Config{URL: "https://pve:8006", Token: good, CAFile: ca}, "holds no PEM certificate"},
		{"bad backend id", Config{URL: "https://pve:8006", Token: good, BackendID: "a b"}, "backend id"},
	}
	for _, c := range cases {
		_, err := New(c.cfg)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: New = %v; want an error containing %q", c.name, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), secret) {
			t.Errorf("%s: the error shows the secret: %v", c.name, err)
		}
	}
}

func TestNewAcceptsURLForms(t *testing.T) {
	for _, u := range []string{"https://PVE.example:8006", "https://pve.example:8006/", "https://pve.example:8006/api2/json/"} {
		b, err := New(Config{URL: u, Token: "alice@pve!repro=s3cret"})
		if err != nil {
			t.Fatalf("New(%q): %v", u, err)
		}
		if b.base != "https://pve.example:8006/api2/json" || b.LockKey() != "pve:https://pve.example:8006" {
			t.Errorf("New(%q): base %q, lock key %q", u, b.base, b.LockKey())
		}
		if b.Kind() != "pve" || b.Owner() != "alice" || b.TokenID() != "alice@pve!repro" {
			t.Errorf("New(%q): kind %q owner %q token id %q", u, b.Kind(), b.Owner(), b.TokenID())
		}
	}
	b, err := New(Config{URL: "https://10.0.0.1:8006", Token: "bob@pve!x=y", BackendID: "lab-1"})
	if err != nil {
		t.Fatal(err)
	}
	if b.LockKey() != "pve:lab-1" {
		t.Errorf("LockKey with a backend id = %q", b.LockKey())
	}
}

func TestDiskName(t *testing.T) {
	for in, want := range map[string]string{"scsi0": "scsi0", "disk0": "scsi0", "disk3": "scsi3", "virtio1": "virtio1"} {
		if got, err := DiskName(in); err != nil || got != want {
			t.Errorf("DiskName(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", "sda", "disk", "scsi", "efidisk0"} {
		if _, err := DiskName(in); err == nil {
			t.Errorf("DiskName(%q) succeeded", in)
		}
	}
}

// A Cluster is one bench's state: a Backend of another endpoint cannot
// use it, so two clusters' caches never mix.
func TestAClusterServesOneEndpoint(t *testing.T) {
	cl := NewCluster()
	if _, err := New(Config{URL: "https://pve1:8006", Token: "alice@pve!repro=s3cret", Cluster: cl}); err != nil {
		t.Fatal(err)
	}
	if _, err := New(Config{URL: "https://PVE1:8006/api2/json", Token: "bob@pve!x=y", Cluster: cl}); err != nil {
		t.Errorf("another token and URL form of the same endpoint: %v", err)
	}
	_, err := New(Config{URL: "https://pve2:8006", Token: "alice@pve!repro=s3cret", Cluster: cl})
	if err == nil || !strings.Contains(err.Error(), "one Cluster per bench") {
		t.Errorf("a Backend of another endpoint on the same Cluster = %v", err)
	}
}
