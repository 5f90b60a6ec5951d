package bmc

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
)

// Config describes one BMC.
type Config struct {
	// Name is the bench's name, for messages ("" = the URL).
	Name string
	// URL is the BMC's address: https://host[:port]. http:// only with
	// Insecure.
	URL      string
	User     string
	Password string
	// Dialect is the vendor's: "redfish" (DMTF, the default), "megarac"
	// (AMI; "ami" too), "dell" ("idrac" too), "supermicro".
	Dialect string
	// System picks the ComputerSystem by Id when the BMC serves several.
	System string
	// BasicAuth sends the credentials with every request instead of
	// opening sessions, for BMCs without a SessionService.
	BasicAuth bool

	// TLS: by default the BMC's certificate is verified against the system
	// roots. CAFile trusts the certificates in that PEM file instead;
	// PinSHA256 (hex SHA-256 of the certificate's DER, colons allowed)
	// trusts exactly that certificate, whatever it names (BMCs ship
	// self-signed certificates for their vendor, not their address);
	// with both, the certificate must chain to CAFile and match the pin.
	// Insecure skips verification and must be set on purpose.
	CAFile    string
	PinSHA256 string
	Insecure  bool
	// HTTP, when set, carries the requests (its Transport; TLS is then
	// its business, and the three options above must be empty).
	HTTP *http.Client

	// Timeout bounds an operation whose context has no deadline
	// (default 2 min).
	Timeout time.Duration
	// Log receives one line per operation; nil discards. Secrets never
	// reach it.
	Log *slog.Logger
}

// Dialects.
const (
	DialectRedfish    = "redfish"
	DialectMegaRAC    = "megarac"
	DialectDell       = "dell"
	DialectSupermicro = "supermicro"
)

// insertStyle is how a vendor wants InsertMedia's body.
type insertStyle int

const (
	// insertFull sends Image, Inserted and WriteProtected, then Image
	// alone on a 400 (bmclib's order; DMTF and iDRAC take the first).
	insertFull insertStyle = iota
	// insertImageOnly sends Image alone: Supermicro refuses Inserted and
	// WriteProtected (bmclib PR #398).
	insertImageOnly
	// insertProtocol sends Image and TransferProtocolType, which AMI
	// requires and bmclib cannot send.
	insertProtocol
)

// dialect is what poligon does differently per vendor.
type dialect struct {
	name string
	// provider is the bmclib provider that serves power (and, for Dell,
	// the screen): "gofish" or "dell".
	provider string
	insert   insertStyle
	// enableRMedia: AMI's virtual media stays empty until the OEM
	// EnableRMedia action.
	enableRMedia bool
	// screen names the screen capture the vendor has ("" none).
	screen string
	// noScreen says why there is none, for the capability error.
	noScreen string
}

var dialects = map[string]*dialect{
	DialectRedfish: {name: DialectRedfish, provider: "gofish", insert: insertFull,
		noScreen: "standard Redfish has no screen capture (Manager.GraphicalConsole only advertises the vendor's KVM)"},
	DialectMegaRAC: {name: DialectMegaRAC, provider: "gofish", insert: insertProtocol, enableRMedia: true,
		noScreen: "an AMI MegaRAC has no screen capture over Redfish (its KVM is the HTML5 viewer's IVTP stream)"},
	DialectDell: {name: DialectDell, provider: "dell", insert: insertFull, screen: "iDRAC ExportServerScreenShot"},
	DialectSupermicro: {name: DialectSupermicro, provider: "gofish", insert: insertImageOnly,
		noScreen: "the Supermicro capture is a web-UI preview that bmclib v2.3.5 reads unreliably (it can answer no image and no error)"},
}

var dialectAliases = map[string]string{"": DialectRedfish, "dmtf": DialectRedfish, "ami": DialectMegaRAC,
	"idrac": DialectDell, "smc": DialectSupermicro}

func lookupDialect(name string) (*dialect, error) {
	n := strings.ToLower(strings.TrimSpace(name))
	if a, ok := dialectAliases[n]; ok {
		n = a
	}
	if d := dialects[n]; d != nil {
		return d, nil
	}
	return nil, fmt.Errorf("bmc: unknown dialect %q: use redfish, megarac, dell or supermicro", name)
}

// endpoint splits the URL the way bmclib's providers want it: the scheme
// and host, and the port apart.
type endpoint struct {
	host string // https://host or https://[v6]
	port string
	url  string // scheme://host:port, for messages and gofish
	name string // the host name or address alone
}

func parseEndpoint(raw string, insecure bool) (endpoint, error) {
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil || u.Hostname() == "" || (u.Scheme != "https" && u.Scheme != "http") {
		return endpoint{}, fmt.Errorf("bmc: the URL %q is not https://host[:port]", raw)
	}
	if u.User != nil {
		return endpoint{}, errors.New("bmc: the URL carries credentials: give them as user and password")
	}
	if u.Path != "" && u.Path != "/" {
		return endpoint{}, fmt.Errorf("bmc: the URL %q has a path: give only https://host[:port]", u.Redacted())
	}
	if u.Scheme == "http" && !insecure {
		return endpoint{}, fmt.Errorf("bmc: %s is plain HTTP, which sends the password in the clear: use https, or set insecure on purpose", u.Host)
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"https": "443", "http": "80"}[u.Scheme]
	}
	host := u.Hostname()
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	return endpoint{host: u.Scheme + "://" + host, port: port, url: u.Scheme + "://" + net.JoinHostPort(u.Hostname(), port), name: u.Hostname()}, nil
}

// PinError is a certificate that does not match the pinned fingerprint.
type PinError struct {
	Want, Got string
}

func (e *PinError) Error() string {
	return fmt.Sprintf("the BMC's certificate has SHA-256 %s, not the pinned %s", e.Got, e.Want)
}

// tlsConfig builds the trust the Config asks for; never a silent skip.
func tlsConfig(c Config, hostname string) (*tls.Config, string, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	pin, err := normalizePin(c.PinSHA256)
	if err != nil {
		return nil, "", err
	}
	if c.Insecure {
		if pin != "" || c.CAFile != "" {
			return nil, "", errors.New("bmc: insecure contradicts ca_file and pin_sha256: set one")
		}
		cfg.InsecureSkipVerify = true
		return cfg, "no verification (insecure)", nil
	}
	var roots *x509.CertPool
	source := "the system trust store"
	if c.CAFile != "" {
		data, err := os.ReadFile(c.CAFile)
		if err != nil {
			return nil, "", fmt.Errorf("bmc: reading the CA file: %w", err)
		}
		roots = x509.NewCertPool()
		if !roots.AppendCertsFromPEM(data) {
			return nil, "", fmt.Errorf("bmc: the CA file %s holds no PEM certificate", c.CAFile)
		}
		source = "the CA file " + c.CAFile
	}
	if pin == "" {
		cfg.RootCAs = roots
		return cfg, source, nil
	}
	// Pinning: the fingerprint is the trust; a CA file, when given, must
	// also vouch for the certificate (its name included).
	cfg.InsecureSkipVerify = true
	cfg.VerifyConnection = func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return &PinError{Want: pin, Got: "(no certificate)"}
		}
		leaf := cs.PeerCertificates[0]
		sum := sha256.Sum256(leaf.Raw)
		if got := hex.EncodeToString(sum[:]); got != pin {
			return &PinError{Want: pin, Got: got}
		}
		if roots == nil {
			return nil
		}
		inter := x509.NewCertPool()
		for _, ic := range cs.PeerCertificates[1:] {
			inter.AddCert(ic)
		}
		_, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, DNSName: hostname})
		return err
	}
	if roots != nil {
		source = "the pinned certificate and " + source
	} else {
		source = "the pinned certificate"
	}
	return cfg, source, nil
}

func normalizePin(p string) (string, error) {
	p = strings.ToLower(strings.NewReplacer(":", "", " ", "").Replace(strings.TrimSpace(p)))
	if p == "" {
		return "", nil
	}
	if b, err := hex.DecodeString(p); err != nil || len(b) != sha256.Size {
		return "", errors.New("bmc: pin_sha256 is not a SHA-256 in hex (64 digits, colons allowed)")
	}
	return p, nil
}
