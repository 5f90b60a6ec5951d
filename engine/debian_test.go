package engine

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/poligon/poligon/internal/store"
	"github.com/poligon/poligon/internal/testvm"
)

// The debian template (images/debian): Debian 12 on a disk with GRUB.
const debianVMID = 9010

// debianServer is a server on a data dir with the debian template, its
// scripts dir holding one tool that runs a recipe (recipes are not tools).
func debianServer(t *testing.T) (*Server, *mcp.ClientSession) {
	t.Helper()
	if testing.Short() {
		t.Skip("boots Debian VMs")
	}
	data := testvm.DataDir(t, "debian")
	// The same disk under OVMF: a template that says uefi.
	uefi := "name = \"debian-uefi\"\nvmid = 9011\ndisk = \"debian/disk.qcow2\"\nmemory_mb = 1024\ncores = 1\nfirmware = \"uefi\"\n"
	if err := os.WriteFile(filepath.Join(data, "templates", "debian-uefi.toml"), []byte(uefi), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t, data)
	cfg.ScriptsDir = t.TempDir()
	recipe := `module.exports = {
  name: "recipe", description: "runs the recipe it names with the params given as JSON",
  params: { recipe: {}, params: { default: "{}" } },
  run(vm, p) { return String(vm.recipe(p.recipe, JSON.parse(p.params))); } };`
	if err := os.WriteFile(filepath.Join(cfg.ScriptsDir, "recipe.js"), []byte(recipe), 0o644); err != nil {
		t.Fatal(err)
	}
	s, cs := newServer(t, cfg)
	return s, cs
}

// cloneDebian clones the debian template, boots it and answers its vmid and
// the time from vm_start to the guest agent's answer.
func cloneDebian(t *testing.T, cs *mcp.ClientSession, name string, full bool) (int, time.Duration) {
	t.Helper()
	return cloneDebianFrom(t, cs, debianVMID, name, full)
}

func cloneDebianFrom(t *testing.T, cs *mcp.ClientSession, template int, name string, full bool) (int, time.Duration) {
	t.Helper()
	out := mustOK(t, cs, "vm_clone", map[string]any{"template_vmid": template, "name": name, "full": full, "wait": 50})
	m := vmidLine.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("vm_clone answered %q", out)
	}
	vmid := atoi(t, m[1])
	t.Cleanup(func() { call(t, cs, "vm_destroy", map[string]any{"vmid": vmid, "confirm": true, "wait": 50}) })
	// A full copy of the 6 GiB disk may outlast the call's wait.
	for upid := regexp.MustCompile(`upid=([^,\s]+)`).FindStringSubmatch(out); upid != nil; {
		out = mustOK(t, cs, "vm_task_wait", map[string]any{"upid": upid[1], "timeout": 50})
		upid = regexp.MustCompile(`upid=([^,\s]+)`).FindStringSubmatch(out)
	}
	start := time.Now()
	bootVM(t, cs, vmid)
	agent := time.Since(start)
	booted(t, cs, vmid)
	t.Logf("%s: vm_start to guest agent %.1f s, to the end of the boot %.1f s", name, agent.Seconds(), time.Since(start).Seconds())
	return vmid, agent
}

// booted waits until systemd says the boot is over (the guest agent
// answers earlier): logind watches the power button only from then on.
func booted(t *testing.T, cs *mcp.ClientSession, vmid int) {
	t.Helper()
	if out := shOK(t, cs, vmid, "systemctl is-system-running --wait || systemctl --failed --no-legend"); out != "running\n" {
		t.Fatalf("systemctl is-system-running: %q", out)
	}
}

// sh runs a command in the guest and answers its stdout, failing unless it
// exits 0.
func shOK(t *testing.T, cs *mcp.ClientSession, vmid int, cmd string) string {
	t.Helper()
	out := mustOK(t, cs, "vm_exec", map[string]any{"vmid": vmid, "command": cmd, "timeout": 120})
	rest, ok := strings.CutPrefix(out, "exit 0\n")
	if !ok {
		t.Fatalf("%q in the guest: %s", cmd, out)
	}
	return rest
}

// reboot restarts the guest from inside and waits for its agent again.
func reboot(t *testing.T, cs *mcp.ClientSession, vmid int) {
	t.Helper()
	boot := shOK(t, cs, vmid, "cat /proc/sys/kernel/random/boot_id")
	mustOK(t, cs, "vm_exec", map[string]any{"vmid": vmid, "command": "(sleep 1; systemctl reboot) >/dev/null 2>&1 &"})
	for deadline := time.Now().Add(4 * time.Minute); ; time.Sleep(2 * time.Second) {
		out, res := call(t, cs, "vm_exec", map[string]any{"vmid": vmid, "command": "cat /proc/sys/kernel/random/boot_id", "timeout": 10})
		if !res.IsError && strings.HasPrefix(out, "exit 0\n") && strings.TrimPrefix(out, "exit 0\n") != boot {
			booted(t, cs, vmid)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("vmid %d did not come back from a reboot in 4 minutes: %q", vmid, out)
		}
	}
}

// TestDebian proves the tools on a real Debian 12 guest (systemd, apt,
// GRUB), one linked clone shared by the steps, and a full clone.
func TestDebian(t *testing.T) {
	_, cs := debianServer(t)
	vmid, _ := cloneDebian(t, cs, "deb", false)

	t.Run("systemd and exec", func(t *testing.T) {
		if out := shOK(t, cs, vmid, ". /etc/os-release; echo $ID $VERSION_ID"); out != "debian 12\n" {
			t.Fatalf("os-release: %q", out)
		}
		if out := shOK(t, cs, vmid, "id -nG test; systemctl is-active ssh qemu-guest-agent systemd-networkd"); out != "test sudo\nactive\nactive\nactive\n" {
			t.Fatalf("user and services: %q", out)
		}
	})

	t.Run("files", func(t *testing.T) {
		content := "written by poligon\nзаписано\n"
		mustOK(t, cs, "vm_file_write", map[string]any{"vmid": vmid, "path": "/home/test/note.txt", "content_base64": base64.StdEncoding.EncodeToString([]byte(content))})
		if out := mustOK(t, cs, "vm_file_read", map[string]any{"vmid": vmid, "path": "/home/test/note.txt"}); !strings.Contains(out, content) {
			t.Fatalf("vm_file_read = %q", out)
		}
	})

	t.Run("enable_service nginx", func(t *testing.T) {
		if out := shOK(t, cs, vmid, "systemctl is-enabled nginx || true"); out != "disabled\n" {
			t.Fatalf("nginx before the recipe: %q", out)
		}
		out := mustOK(t, cs, "vm_recipe", map[string]any{"vmid": vmid, "recipe": "enable_service", "params": `{"service": "nginx"}`})
		if !strings.Contains(out, "active") {
			t.Fatalf("enable_service nginx = %q", out)
		}
		if out := shOK(t, cs, vmid, "systemctl is-enabled nginx; curl -s http://127.0.0.1/ | grep -c 'Welcome to nginx'"); out != "enabled\n2\n" {
			t.Fatalf("nginx after the recipe: %q", out)
		}
	})

	t.Run("run across a reboot", func(t *testing.T) {
		// A detached run outlives the call; the reboot ends it, and the
		// next vm_run says what became of it instead of hanging.
		cmd := "echo started > /root/run.log; sleep 600"
		if out := mustOK(t, cs, "vm_run", map[string]any{"vmid": vmid, "command": cmd, "wait": 1}); !strings.HasPrefix(out, "running for") {
			t.Fatalf("vm_run = %q", out)
		}
		reboot(t, cs, vmid)
		out := mustOK(t, cs, "vm_run", map[string]any{"vmid": vmid, "command": cmd, "wait": 1})
		if strings.HasPrefix(out, "running for") && !strings.Contains(out, "restart") {
			t.Fatalf("vm_run after a reboot claims the old run goes on: %q", out)
		}
		t.Logf("vm_run after the reboot: %s", out)
		if got := runUntilEnd(t, cs, vmid, "cat /root/run.log", true); !strings.Contains(got, "started") {
			t.Fatalf("vm_run after the reboot = %q", got)
		}
	})

	t.Run("snapshot with memory and rollback", func(t *testing.T) {
		// A process started before the snapshot is running again after the
		// rollback: the memory came back, not only the disk.
		shOK(t, cs, vmid, "echo before > /root/state; systemd-run --unit=poligon-sleeper sleep 3600")
		pid := shOK(t, cs, vmid, "systemctl show -p MainPID --value poligon-sleeper")
		mustOK(t, cs, "vm_snapshot", map[string]any{"vmid": vmid, "name": "warm", "wait": 50})
		shOK(t, cs, vmid, "echo after > /root/state; systemctl stop poligon-sleeper")
		mustOK(t, cs, "vm_rollback", map[string]any{"vmid": vmid, "name": "warm", "wait": 50})
		var out string
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Second) {
			o, res := call(t, cs, "vm_exec", map[string]any{"vmid": vmid, "command": "cat /root/state; systemctl show -p MainPID --value poligon-sleeper"})
			if out = o; !res.IsError || time.Now().After(deadline) {
				break
			}
		}
		if out != "exit 0\nbefore\n"+pid {
			t.Fatalf("after the rollback: %q, want before and pid %s", out, pid)
		}
	})

	t.Run("disk resize and reboot", func(t *testing.T) {
		size := func() int {
			n, err := strconv.Atoi(strings.TrimSpace(shOK(t, cs, vmid, "df --output=size -BG / | tail -1 | tr -d G")))
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
		before := size()
		mustOK(t, cs, "vm_disk_resize", map[string]any{"vmid": vmid, "size_gb": 10})
		reboot(t, cs, vmid)
		if after := size(); after < before+3 {
			t.Fatalf("/ is %d GB after growing the disk from 6 to 10 GB and a reboot (was %d)", after, before)
		}
	})

	t.Run("update from a local apt repository", func(t *testing.T) {
		// The guest has probe 1 installed and sees one repository, served
		// by the test on the host's loopback (10.0.2.2 from the guest),
		// with probe 2: the recipe upgrades it and reboots into it.
		repo := aptRepo(t, debPackage(t, "poligon-probe", "2"), debPackage(t, "poligon-extra", "3"))
		shOK(t, cs, vmid, "mkdir -p /root/apt-off && mv /etc/apt/sources.list.d/* /etc/apt/sources.list /root/apt-off/ 2>/dev/null; "+
			"echo 'deb [trusted=yes] http://10.0.2.2:"+repo+"/ ./' > /etc/apt/sources.list")
		mustOK(t, cs, "vm_file_write", map[string]any{"vmid": vmid, "path": "/root/probe1.deb", "content_base64": base64.StdEncoding.EncodeToString(debPackage(t, "poligon-probe", "1"))})
		shOK(t, cs, vmid, "dpkg -i /root/probe1.deb")
		boot := shOK(t, cs, vmid, "cat /proc/sys/kernel/random/boot_id")
		out := mustOK(t, cs, "vm_recipe", map[string]any{"vmid": vmid, "recipe": "update"})
		if !strings.Contains(out, "6.1.0") {
			t.Fatalf("update = %q, want the running kernel", out)
		}
		got := strings.Fields(shOK(t, cs, vmid, "dpkg-query -W -f '${Version}' poligon-probe; echo; cat /proc/sys/kernel/random/boot_id"))
		if len(got) != 2 || got[0] != "2" || got[1]+"\n" == boot {
			t.Fatalf("after update: version and boot id %q, want 2 and not %s", got, boot)
		}
		// vm_install (apt-get detached, called again while it runs) on a
		// real apt, from the same repository.
		for deadline := time.Now().Add(5 * time.Minute); ; {
			out = mustOK(t, cs, "vm_install", map[string]any{"vmid": vmid, "packages": "poligon-extra"})
			if !strings.HasPrefix(out, "still installing") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("vm_install still installing after 5 minutes: %q", out)
			}
		}
		if !strings.Contains(out, "poligon-extra-3.all") {
			t.Fatalf("vm_install poligon-extra = %q, want its version", out)
		}
		shOK(t, cs, vmid, "rm /etc/apt/sources.list; mv /root/apt-off/* /etc/apt/ 2>/dev/null; mv /etc/apt/*.sources /etc/apt/sources.list.d/ 2>/dev/null; true")
	})

	t.Run("ACPI stop shuts systemd down", func(t *testing.T) {
		if out := mustOK(t, cs, "vm_stop", map[string]any{"vmid": vmid, "wait": 50}); !strings.Contains(out, "stopped") {
			t.Fatalf("vm_stop = %q", out)
		}
		bootVM(t, cs, vmid)
		booted(t, cs, vmid)
		// The previous boot's journal: logind saw the power button, and
		// systemd went through its power-off to the end of the journal.
		out := shOK(t, cs, vmid, "journalctl -b -1 -o cat --no-pager | grep -E 'Power key pressed|System Power Off|Journal stopped' | uniq")
		if !strings.HasPrefix(out, "Power key pressed") || !strings.Contains(out, "System Power Off") || !strings.HasSuffix(out, "Journal stopped\n") {
			t.Fatalf("the previous boot's journal does not show an ACPI shutdown:\n%s", out)
		}
	})

	t.Run("UEFI", func(t *testing.T) {
		vm, _ := cloneDebianFrom(t, cs, 9011, "debuefi", false)
		if out := shOK(t, cs, vm, "test -d /sys/firmware/efi && findmnt -no FSTYPE /boot/efi"); out != "vfat\n" {
			t.Fatalf("booted with OVMF: %q, want EFI firmware and the ESP mounted", out)
		}
		mustOK(t, cs, "vm_destroy", map[string]any{"vmid": vm, "confirm": true, "wait": 50})
	})

	t.Run("full clone", func(t *testing.T) {
		full, _ := cloneDebian(t, cs, "debfull", true)
		// Its own machine: a machine-id and host keys of its own.
		a := shOK(t, cs, vmid, "cat /etc/machine-id /etc/ssh/ssh_host_ed25519_key.pub")
		b := shOK(t, cs, full, "cat /etc/machine-id /etc/ssh/ssh_host_ed25519_key.pub")
		if a == b || len(strings.Fields(b)) < 3 {
			t.Fatalf("two clones share their identity:\n%s\n%s", a, b)
		}
	})
}

// standDBPassword is the database password of debianStandPlan: a test's.
const standDBPassword = "apppw-not-secret"

// debianStandPlan is a two-machine stand of debian guests: a PostgreSQL
// server with a user, a database and a row, and an application machine
// that reads the row through {{ip.db}}.
func debianStandPlan(name string) map[string]any {
	const pgpass = standDBPassword
	return map[string]any{
		"name": name,
		"machines": []any{
			map[string]any{"role": "db", "template": "debian", "steps": []any{
				map[string]any{"exec": `cd /etc/postgresql/*/main && echo "listen_addresses = '*'" >> postgresql.conf && echo "host all all 0.0.0.0/0 scram-sha-256" >> pg_hba.conf`},
				map[string]any{"recipe": map[string]any{"name": "enable_service", "service": "postgresql"}},
				map[string]any{"exec": `runuser -u postgres -- psql -v ON_ERROR_STOP=1 -c "CREATE USER app PASSWORD '` + pgpass + `'" -c "CREATE DATABASE shop OWNER app"`},
				map[string]any{"exec": `PGPASSWORD=` + pgpass + ` psql -v ON_ERROR_STOP=1 -h 127.0.0.1 -U app shop -c "CREATE TABLE orders (id int, item text); INSERT INTO orders VALUES (1, 'row-from-the-db')"`},
			}},
			map[string]any{"role": "app", "template": "debian", "steps": []any{
				map[string]any{"expect": map[string]any{"command": `PGPASSWORD=` + pgpass + ` psql -h {{ip.db}} -U app shop -tAc "SELECT item FROM orders WHERE id = 1"`, "contains": "row-from-the-db", "timeout": 60}},
			}},
		},
	}
}

// TestDebianStand builds debianStandPlan and reads the row inside the
// application guest.
func TestDebianStand(t *testing.T) {
	_, cs := debianServer(t)
	plan := debianStandPlan("shop")
	start := time.Now()
	if out := mustOK(t, cs, "stand_apply", map[string]any{"plan": plan}); !strings.Contains(out, `"status": "running"`) {
		t.Fatalf("stand_apply = %s", out)
	}
	t.Cleanup(func() { call(t, cs, "stand_destroy", map[string]any{"stand": "shop", "confirm": true}) })
	v := waitStand(t, cs, "shop", stopped)
	raw, _ := json.MarshalIndent(v, "", "  ")
	if v.Status != store.StandDone {
		t.Fatalf("stand shop ended %s:\n%s", v.Status, raw)
	}
	t.Logf("the debian stand built in %.0f s:\n%s", time.Since(start).Seconds(), raw)
	db, app := machineOf(t, v, "db"), machineOf(t, v, "app")
	if db.IP == "" || db.IP == app.IP {
		t.Fatalf("addresses: db %q app %q", db.IP, app.IP)
	}
	// The row is read inside the application guest, by the test too.
	out := shOK(t, cs, app.VMID, `PGPASSWORD=`+standDBPassword+` psql -h `+db.IP+` -U app shop -tAc "SELECT count(*) FROM orders"`)
	if out != "1\n" {
		t.Fatalf("the app machine counts %q rows", out)
	}
}

// debPackage builds a Debian package of that name and version holding
// /usr/share/NAME/version, with the host's dpkg-deb.
func debPackage(t *testing.T, name, version string) []byte {
	t.Helper()
	if _, err := exec.LookPath("dpkg-deb"); err != nil {
		t.Skip("dpkg-deb not installed")
	}
	dir := t.TempDir()
	root := filepath.Join(dir, "root")
	for file, content := range map[string]string{
		"DEBIAN/control":                 "Package: " + name + "\nVersion: " + version + "\nArchitecture: all\nMaintainer: poligon tests <tests@poligon.invalid>\nDescription: a package the update test upgrades\n",
		"usr/share/" + name + "/version": version + "\n",
	} {
		os.MkdirAll(filepath.Dir(filepath.Join(root, file)), 0o755)
		if err := os.WriteFile(filepath.Join(root, file), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	deb := filepath.Join(dir, "p.deb")
	if out, err := exec.Command("dpkg-deb", "--root-owner-group", "--build", root, deb).CombinedOutput(); err != nil {
		t.Fatalf("dpkg-deb: %v\n%s", err, out)
	}
	data, err := os.ReadFile(deb)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// aptRepo serves a flat apt repository (Packages plus the .debs) on the
// host's loopback and answers its port.
func aptRepo(t *testing.T, debs ...[]byte) string {
	t.Helper()
	files := map[string][]byte{}
	var packages strings.Builder
	for i, deb := range debs {
		f, err := os.CreateTemp(t.TempDir(), "*.deb")
		if err != nil {
			t.Fatal(err)
		}
		f.Write(deb)
		f.Close()
		fields, err := exec.Command("dpkg-deb", "-f", f.Name()).Output()
		if err != nil {
			t.Fatal(err)
		}
		name := fmt.Sprintf("p%d.deb", i)
		files["/"+name] = deb
		sum := sha256.Sum256(deb)
		fmt.Fprintf(&packages, "%sFilename: ./%s\nSize: %d\nSHA256: %x\n\n", fields, name, len(deb), sum)
	}
	files["/Packages"] = []byte(packages.String())
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		data, ok := files[path.Clean(r.URL.Path)] // apt asks for /./Packages
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Write(data)
	}))
	t.Cleanup(srv.Close)
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	return port
}
