package config

import (
	"fmt"
	"os"
	"regexp"
	"strings"
)

// Bench is one place to run VMs: the local QEMU backend, a Proxmox VE
// cluster, or one physical machine behind a PiKVM or a BMC. The file writes
// a bench's keys flat under [[bench]]; here they are grouped by the
// backend types that take them, and Check refuses a key of another type.
type Bench struct {
	Name string `toml:"name"`
	Type string `toml:"type"` // qemu | pve | pikvm | bmc (megarac: a bmc of that dialect)
	// Description tells people and agents what the bench is for.
	Description string `toml:"description"`

	QEMUBench     // type qemu
	Endpoint      // types pve, pikvm, bmc
	PVEBench      // type pve
	PhysicalBench // types pikvm, bmc
}

// QEMUBench is a local bench: QEMU on this machine.
type QEMUBench struct {
	DataDir string `toml:"data_dir"` // default: the top-level data_dir
	Accel   string `toml:"accel"`    // auto | kvm | tcg; default: the top-level accel
}

// Endpoint is where a remote bench's API answers.
type Endpoint struct {
	API    string `toml:"api"`     // pve: https://host:8006/api2/json; pikvm, bmc: the controller's https:// URL
	CAFile string `toml:"ca_file"` // else SSL_CERT_FILE / SSL_CERT_DIR / the system store
}

// PVEBench is a Proxmox VE cluster.
type PVEBench struct {
	Token     Secret `toml:"token"`      // stdio mode only; over HTTP each request carries X-PVE-Token
	BackendID string `toml:"backend_id"` // aliases of one cluster share caches and locks
	Storage   string `toml:"storage"`
}

// PhysicalBench is one machine behind a PiKVM or a BMC. The password (and a
// TOTP secret) come from an environment variable or a file, never from
// the config file.
type PhysicalBench struct {
	User         string `toml:"user"`
	PasswordEnv  string `toml:"password_env"`
	PasswordFile string `toml:"password_file"`
	TOTPEnv      string `toml:"totp_env"`   // pikvm with 2FA: the TOTP secret
	TOTPFile     string `toml:"totp_file"`  //
	PinSHA256    string `toml:"pin_sha256"` // the controller's certificate, when no CA signs it
	Dialect      string `toml:"dialect"`    // bmc: redfish (default), megarac, idrac, supermicro
	// Rental: tools need the caller's lease (bench_lease).
	Rental bool `toml:"rental"`
	// KeyEnv names the variable holding the bench key (X-Bench-Key over
	// HTTP; POLIGON_MCP_COMMON_KEY serves every bench without one).
	KeyEnv string `toml:"key_env"`
	// Allow is what the operator allows on the machine: hid (keyboard and
	// mouse), power, media. Default: hid only.
	Allow []string `toml:"allow"`
	// DryRun: power and media actions (and HID input) are logged and
	// skipped. Approval: "" none, "confirm" (confirm=true), "ask" (the
	// human through MCP elicitation; confirm=true where the client cannot).
	DryRun   bool   `toml:"dry_run"`
	Approval string `toml:"approval"`

	Password Secret `toml:"-"`
	TOTP     Secret `toml:"-"`
	Key      Secret `toml:"-"`
}

// Physical reports whether the bench is one physical machine.
func (b Bench) Physical() bool { return b.Type == "pikvm" || b.Type == "bmc" || b.Type == "megarac" }

// Storage is a place install images live: a named NFS/CIFS share, an HTTP
// mirror or an ISO pool (storage_list; bench_media's source).
type Storage struct {
	Name        string `toml:"name"`
	Type        string `toml:"type"` // nfs | cifs | http | iso-pool
	Address     string `toml:"address"`
	User        string `toml:"user"`
	Description string `toml:"description"`
}

// benchDefaults fills what each bench inherits or defaults to.
func (c *Config) benchDefaults() {
	if !c.fileBenches {
		// No benches in the file: the embedded default, plus PVE_API's if set.
		c.Benches = append([]Bench{{Name: "local", Type: "qemu", Description: "QEMU on this machine"}}, c.Benches...)
	}
	for i := range c.Benches {
		b := &c.Benches[i]
		if b.Type == "qemu" && b.DataDir == "" {
			b.DataDir = c.DataDir
		}
		if b.Type == "qemu" && b.Accel == "" {
			b.Accel = c.Accel
		}
		if b.Type == "megarac" { // the manual's name for a MegaRAC BMC
			b.Type, b.Dialect = "bmc", "megarac"
		}
		if b.Type == "bmc" && b.Dialect == "" {
			b.Dialect = "redfish"
		}
		if b.Physical() && b.Allow == nil {
			b.Allow = []string{"hid"}
		}
		if b.Physical() && c.DryRun {
			b.DryRun = true
		}
	}
	if c.DefaultBench == "" {
		c.DefaultBench = c.Benches[len(c.Benches)-1].Name // PVE_API's bench when set
		if c.fileBenches {
			c.DefaultBench = c.Benches[0].Name
		}
	}
}

var (
	benchName = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,31}$`)
	backendID = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)
)

// checkBenches checks the benches, the default bench and the storages.
func (c *Config) checkBenches() []error {
	var problems []error
	bad := func(format string, args ...any) { problems = append(problems, fmt.Errorf(format, args...)) }
	names := map[string]bool{}
	for i, b := range c.Benches {
		where := fmt.Sprintf("bench[%d]", i)
		if b.Name != "" {
			where = fmt.Sprintf("bench %q", b.Name)
		}
		switch {
		case !benchName.MatchString(b.Name):
			bad("%s: name must match %s", where, benchName)
		case names[b.Name]:
			bad("%s: the name is used twice", where)
		}
		names[b.Name] = true
		switch b.Type {
		case "qemu":
			if b.API != "" || b.Token != "" {
				bad("%s: api and token are for type pve", where)
			}
			// An inherited bad value is the top-level accel's problem.
			if !validAccel(b.Accel) && b.Accel != c.Accel {
				bad("%s: accel %q: use auto, kvm or tcg", where, b.Accel)
			}
		case "pve":
			if b.Accel != "" {
				bad("%s: accel is for type qemu", where)
			}
			if !strings.HasPrefix(b.API, "https://") {
				bad("%s: api must be an https:// URL of the PVE API (got %q)", where, b.API)
			}
			if b.Token != "" && !strings.Contains(b.Token.Reveal(), "!") {
				bad("%s: token must look like user@realm!tokenid=secret", where)
			}
			if b.BackendID != "" && !backendID.MatchString(b.BackendID) {
				bad("%s: backend_id uses ASCII letters, digits, ., _ and - (at most 64 bytes)", where)
			}
			if b.CAFile != "" {
				if _, err := os.Stat(b.CAFile); err != nil {
					bad("%s: ca_file: %v", where, err)
				}
			}
		case "pikvm", "bmc":
			problems = append(problems, checkPhysical(where, b)...)
		default:
			bad("%s: type must be qemu, pve, pikvm, bmc or megarac (got %q)", where, b.Type)
		}
	}
	if !names[c.DefaultBench] {
		bad("default_bench %q is not a configured bench", c.DefaultBench)
	}
	names = map[string]bool{}
	for i, st := range c.Storages {
		where := fmt.Sprintf("storage[%d]", i)
		switch {
		case !benchName.MatchString(st.Name):
			bad("%s: name must match %s", where, benchName)
		case names[st.Name]:
			bad("storage %q: the name is used twice", st.Name)
		}
		names[st.Name] = true
		switch st.Type {
		case "nfs", "cifs", "http", "iso-pool":
		default:
			bad("storage %q: type must be nfs, cifs, http or iso-pool (got %q)", st.Name, st.Type)
		}
		if st.Type == "http" && !strings.HasPrefix(st.Address, "http://") && !strings.HasPrefix(st.Address, "https://") {
			bad("storage %q: an http storage's address is an http(s):// URL", st.Name)
		}
	}
	return problems
}

var pinSHA256 = regexp.MustCompile(`^([0-9a-fA-F]{2}:?){31}[0-9a-fA-F]{2}$`)

// checkPhysical checks a pikvm or bmc bench. Problems name the key at
// fault, never a secret's value.
func checkPhysical(where string, b Bench) []error {
	var problems []error
	bad := func(format string, args ...any) { problems = append(problems, fmt.Errorf(format, args...)) }
	if !strings.HasPrefix(b.API, "https://") {
		bad("%s: api must be the controller's https:// URL", where)
	}
	if b.User == "" {
		bad("%s: user is missing", where)
	}
	switch {
	case b.PasswordFile != "":
		if _, err := os.ReadFile(b.PasswordFile); err != nil {
			bad("%s: password_file: %v", where, err)
		}
	case b.Password == "" && b.PasswordEnv != "":
		bad("%s: the variable %s (password_env) is empty", where, b.PasswordEnv)
	case b.Password == "":
		bad("%s: no password: set password_env or password_file", where)
	}
	if b.TOTPFile != "" {
		if _, err := os.ReadFile(b.TOTPFile); err != nil {
			bad("%s: totp_file: %v", where, err)
		}
	}
	if b.PinSHA256 != "" && !pinSHA256.MatchString(b.PinSHA256) {
		bad("%s: pin_sha256 is the certificate's SHA-256: 64 hex digits (colons allowed)", where)
	}
	if b.CAFile != "" {
		if _, err := os.Stat(b.CAFile); err != nil {
			bad("%s: ca_file: %v", where, err)
		}
	}
	for _, a := range b.Allow {
		if a != "hid" && a != "power" && a != "media" {
			bad("%s: allow %q: use hid, power and media", where, a)
		}
	}
	switch b.Approval {
	case "", "confirm", "ask":
	default:
		bad("%s: approval %q: use confirm or ask (or leave it out)", where, b.Approval)
	}
	if b.Type == "bmc" {
		switch b.Dialect {
		case "redfish", "megarac", "ami", "idrac", "dell", "supermicro":
		default:
			bad("%s: dialect %q: use redfish, megarac, idrac or supermicro", where, b.Dialect)
		}
	} else if b.Dialect != "" {
		bad("%s: dialect is for type bmc", where)
	}
	if b.Accel != "" || b.DataDir != "" {
		bad("%s: accel and data_dir are for type qemu", where)
	}
	return problems
}

// validAccel: the accelerators a qemu bench can ask for (the qemu
// backend's ResolveAccel takes the same; config stays a leaf).
func validAccel(s string) bool { return s == "auto" || s == "kvm" || s == "tcg" }

// Bench answers the bench called name ("" = the default).
func (c *Config) Bench(name string) (Bench, bool) {
	if name == "" {
		name = c.DefaultBench
	}
	for _, b := range c.Benches {
		if b.Name == name {
			return b, true
		}
	}
	return Bench{}, false
}
