package image

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The image test builds the image from this checkout (a base made by
// debootstrap, since no registry is reachable here) and runs it: health
// endpoints, a tool call with a bearer token over Streamable HTTP, the
// non-root uid, the health check, a graceful stop, and the refused start
// with no CA certificate. It takes minutes: `make image-test`.
//
// What makes `podman run` work in a sandbox that forbids raising rlimits:
// a containers.conf with `default_ulimits = []` (podman then puts no
// rlimits in the OCI spec; --ulimit host does not help), runc as the
// runtime, and the vfs storage driver (the build uses the host network).
func TestImage(t *testing.T) {
	if os.Getenv("POLIGON_IMAGE_TEST") != "1" {
		t.Skip("builds and runs the container image (minutes): set POLIGON_IMAGE_TEST=1, or run make image-test")
	}
	began := time.Now()
	installTools(t)
	conf := filepath.Join(t.TempDir(), "containers.conf")
	runtime := ""
	if _, err := exec.LookPath("runc"); err == nil {
		runtime = "[engine]\nruntime = \"runc\"\n"
	}
	os.WriteFile(conf, []byte("[containers]\ndefault_ulimits = []\n"+runtime), 0o644)
	podmanCmd := strings.Fields(envOr("POLIGON_IMAGE_PODMAN", "podman --storage-driver vfs"))
	image := envOr("POLIGON_IMAGE", "localhost/poligon:imagetest")
	podman := func(args ...string) *exec.Cmd {
		cmd := exec.Command(podmanCmd[0], append(podmanCmd[1:], args...)...)
		cmd.Env = append(os.Environ(), "CONTAINERS_CONF="+conf)
		return cmd
	}

	// make image: the base from Debian packages, then the Containerfile
	// (with its license check).
	build := exec.Command("make", "-C", repo, "image", "PODMAN="+strings.Join(podmanCmd, " "), "IMAGE="+image,
		"IMAGE_BUILD_FLAGS=--network host")
	build.Env = append(os.Environ(), "CONTAINERS_CONF="+conf)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("make image: %v\n%s", err, tail(out, 60))
	} else if !strings.Contains(string(out), " 0 refused") {
		t.Errorf("the build did not run the license check:\n%s", tail(out, 30))
	}
	t.Logf("make image: %s", time.Since(began).Round(time.Second))
	if out, err := podman("image", "inspect", "-f", "{{.Size}} {{.Config.User}} {{json .Config.Healthcheck}}", image).Output(); err == nil {
		t.Logf("image %s: size, user, health check: %s", image, strings.TrimSpace(string(out)))
	}

	// The host's side: certs (a CA of ours), a config with a bearer token,
	// evidence and state owned by the image's uid (rootful podman, no
	// user namespace: uid 1000 is uid 1000 here too).
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	for _, d := range []string{"certs", "empty-certs", "scripts", "evidence", "var"} {
		os.MkdirAll(filepath.Join(dir, d), 0o755)
	}
	os.Chown(filepath.Join(dir, "evidence"), 1000, 1000)
	os.Chown(filepath.Join(dir, "var"), 1000, 1000)
	writeCA(t, filepath.Join(dir, "certs", "lab-ca.pem"))
	token := "imagetest-" + hex.EncodeToString(randBytes(12))
	sum := sha256.Sum256([]byte(token))
	os.WriteFile(filepath.Join(dir, "config.toml"), []byte(fmt.Sprintf("[[token]]\nowner = \"alice\"\nsha256 = %q\n", hex.EncodeToString(sum[:]))), 0o644)
	port := freePort(t)
	name := "poligon-imagetest-" + hex.EncodeToString(randBytes(4))
	volumes := func(certs string) []string {
		return []string{
			"-v", filepath.Join(dir, "config.toml") + ":/etc/poligon/config.toml:ro",
			"-v", filepath.Join(dir, certs) + ":/etc/poligon/certs:ro",
			"-v", filepath.Join(dir, "scripts") + ":/etc/poligon/scripts:ro",
			"-v", filepath.Join(dir, "evidence") + ":/evidence",
			"-v", filepath.Join(dir, "var") + ":/var/lib/poligon",
		}
	}
	// The image's own bind (0.0.0.0:8811) behind a published loopback port:
	// its HEALTHCHECK then probes what it would in production.
	run := append([]string{"run", "-d", "--name", name, "-p", fmt.Sprintf("127.0.0.1:%d:8811", port)}, volumes("certs")...)
	if out, err := podman(append(run, image)...).CombinedOutput(); err != nil {
		t.Fatalf("podman run: %v\n%s", err, out)
	}
	defer podman("rm", "-f", "-t", "0", name).Run()
	logs := func() string { out, _ := podman("logs", name).CombinedOutput(); return string(out) }

	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	var health map[string]any
	deadline := time.Now().Add(90 * time.Second) // the KVM probe and the OCR engines start first
	for {
		if err := getJSON(base+"/healthz", &health); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no /healthz in 90 s; the container's log:\n%s", logs())
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Logf("/healthz: %v", health)
	if health["status"] != "ok" || health["version"] == "" || len(fmt.Sprint(health["commit"])) != 40 {
		t.Errorf("/healthz = %v: want status ok and the checkout's full commit", health)
	}
	var ready map[string]any
	if err := getJSON(base+"/readyz", &ready); err != nil {
		t.Errorf("/readyz: %v (%v); the log:\n%s", err, ready, logs())
	}
	t.Logf("/readyz: %v", ready)

	// A tool call as a client makes it: Streamable HTTP with a bearer token.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client := &http.Client{Transport: bearer{token, http.DefaultTransport}}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "imagetest", Version: "1"}, nil).Connect(ctx,
		&mcp.StreamableClientTransport{Endpoint: base + "/mcp", HTTPClient: client}, nil)
	if err != nil {
		t.Fatalf("MCP initialize over HTTP: %v\n%s", err, logs())
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "vm_list_my_vms"})
	if err != nil || res.IsError || !strings.HasPrefix(res.Content[0].(*mcp.TextContent).Text, "owner alice: 0 VMs") {
		t.Errorf("vm_list_my_vms with a bearer token: %+v, %v", res, err)
	}
	cs.Close()
	// And without one: refused before anything runs.
	if resp, err := http.Post(base+"/mcp", "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize"}`)); err != nil || resp.StatusCode != 401 {
		t.Errorf("an MCP request without a token: %v %v, want 401", resp.Status, err)
	}

	// Not root: the exec'd shell and the container's PID 1 (tini) and poligon.
	if out, err := podman("exec", name, "sh", "-c", "id -u; for p in /proc/[0-9]*; do awk '/^Uid:/{print $2}' $p/status; done | sort -u").Output(); err != nil ||
		strings.Fields(string(out))[0] != "1000" || strings.Contains(string(out), "\n0\n") {
		t.Errorf("uids in the container: %q, %v; want 1000 only", out, err)
	}
	if out, err := podman("healthcheck", "run", name).CombinedOutput(); err != nil {
		t.Errorf("podman healthcheck run: %v\n%s", err, out)
	}
	if out, err := podman("exec", name, "poligon", "doctor").CombinedOutput(); err != nil {
		t.Errorf("poligon doctor in the container: %v\n%s", err, out)
	} else {
		t.Logf("poligon doctor in the container:\n%s", out)
	}

	// podman stop -t 90: SIGTERM, the server finishes and exits 0.
	if out, err := podman("stop", "-t", "90", name).CombinedOutput(); err != nil {
		t.Errorf("podman stop: %v\n%s", err, out)
	}
	if out, _ := podman("inspect", "-f", "{{.State.ExitCode}}", name).Output(); strings.TrimSpace(string(out)) != "0" ||
		!strings.Contains(logs(), "shutting down: finishing calls in flight") {
		t.Errorf("after podman stop: exit %s; the log:\n%s", out, logs())
	}

	// No CA certificate in the certs volume: the start is refused.
	refused := append([]string{"run", "--rm"}, volumes("empty-certs")...)
	out, err := podman(append(refused, image)...).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "error: outbound TLS: no CA certificates were loaded from SSL_CERT_DIR=/etc/poligon/certs") {
		t.Errorf("serve with an empty certs volume: %v\n%s", err, out)
	}
	t.Logf("the image test took %s", time.Since(began).Round(time.Second))
}

// installTools installs what the test needs from Debian when it is root.
func installTools(t *testing.T) {
	var missing []string
	for bin, pkg := range map[string]string{"podman": "podman", "debootstrap": "debootstrap", "runc": "runc", "newuidmap": "uidmap"} {
		if _, err := exec.LookPath(bin); err != nil {
			missing = append(missing, pkg)
		}
	}
	if len(missing) == 0 {
		return
	}
	if os.Getuid() != 0 {
		t.Skipf("needs %s: apt-get install them as root", strings.Join(missing, " "))
	}
	for _, args := range [][]string{{"update", "-qq"}, append([]string{"install", "-y", "-qq", "--no-install-recommends"}, missing...)} {
		cmd := exec.Command("apt-get", args...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("apt-get %s: %v\n%s", args[0], err, tail(out, 20))
		}
	}
}

type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

func getJSON(url string, v any) error {
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		return err
	}
	if resp.StatusCode != 200 {
		return fmt.Errorf("%s", resp.Status)
	}
	return nil
}

func writeCA(t *testing.T, path string) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "imagetest CA"}, IsCA: true,
		BasicConstraintsValid: true, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour), KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
}

func freePort(t *testing.T) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func randBytes(n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func tail(b []byte, lines int) string {
	l := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(l[max(0, len(l)-lines):], "\n")
}
