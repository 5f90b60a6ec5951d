package pvetest

import (
	"fmt"
	"maps"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// vmFor resolves the {node}/{vmid} of a call and checks priv on the VM.
// s.mu is held.
func (s *Server) vmFor(c *call, priv string) (*vm, error) {
	id, err := c.vmid()
	if err != nil {
		return nil, err
	}
	if err := s.nodeExists(c.vars["node"]); err != nil {
		return nil, err
	}
	if err := s.checkVM(c.tok, id, priv); err != nil {
		return nil, err
	}
	return s.vmAt(c.vars["node"], id)
}

// vmForAny is vmFor for a call that needs any one of privs.
func (s *Server) vmForAny(c *call, privs ...string) (*vm, error) {
	id, err := c.vmid()
	if err != nil {
		return nil, err
	}
	if err := s.nodeExists(c.vars["node"]); err != nil {
		return nil, err
	}
	if err := s.checkAny(c.tok, fmt.Sprintf("/vms/%d", id), privs...); err != nil {
		return nil, err
	}
	return s.vmAt(c.vars["node"], id)
}

func lockedError(v *vm) error {
	if v.lock != "" {
		return fail(500, "VM is locked (%s)", v.lock)
	}
	return nil
}

func (s *Server) getConfig(c *call) (any, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, err := s.vmFor(c, "VM.Audit")
	if err != nil {
		return nil, err
	}
	out := map[string]any{"digest": randomHex(20)}
	for k, val := range v.config {
		out[k] = val
	}
	for _, k := range []string{"cores", "sockets", "template"} { // numbers in PVE's answer
		if n, err := strconv.Atoi(v.config[k]); err == nil {
			out[k] = n
		}
	}
	if v.lock != "" {
		out["lock"] = v.lock
	}
	return out, nil
}

// configPriv is the privilege PVE checks to set a config key.
func configPriv(key, value string) string {
	switch {
	case key == "memory" || key == "balloon":
		return "VM.Config.Memory"
	case key == "cores" || key == "sockets" || key == "cpu" || key == "vcpus":
		return "VM.Config.CPU"
	case key == "scsihw" || key == "machine" || key == "vga" || key == "bios":
		return "VM.Config.HWType"
	case strings.HasPrefix(key, "net"):
		return "VM.Config.Network"
	case strings.Contains(value, "media=cdrom"):
		return "VM.Config.CDROM"
	case diskKey.MatchString(key):
		return "VM.Config.Disk"
	}
	return "VM.Config.Options"
}

var notConfigKeys = map[string]bool{"node": true, "vmid": true, "digest": true, "delete": true, "skiplock": true,
	"background_delay": true, "pool": true, "start": true, "unique": true}

// configChanges checks and collects the config keys of a call; each key's
// privilege is checked on path (/vms/ID, or /pool/P for a VM being created
// into pool P, as qemu-server's check_vm_perm does).
func (s *Server) configChanges(c *call, path string) (set map[string]string, del []string, err error) {
	set = map[string]string{}
	for k := range c.params {
		if notConfigKeys[k] {
			continue
		}
		val := c.params.Get(k)
		if err := s.check(c.tok, path, configPriv(k, val)); err != nil {
			return nil, nil, err
		}
		set[k] = val
	}
	for _, k := range strings.FieldsFunc(c.str("delete"), func(r rune) bool { return r == ',' || r == ';' || r == ' ' }) {
		if err := s.check(c.tok, path, configPriv(k, "")); err != nil {
			return nil, nil, err
		}
		del = append(del, k)
	}
	if v := set["ide2"]; v != "" && strings.Contains(v, "media=cdrom") {
		if vol, _, _ := strings.Cut(v, ","); vol != "none" && vol != "cdrom" && !s.isoExists(vol) {
			return nil, nil, fail(500, "volume '%s' does not exist", vol)
		}
	}
	if err := s.storageChecks(c.tok, set); err != nil {
		return nil, nil, err
	}
	if err := s.bridgeChecks(c.tok, set); err != nil {
		return nil, nil, err
	}
	return set, del, nil
}

// bridgeChecks is qemu-server's check_bridge_access (PVE 8.0 and later):
// SDN.Use on /sdn/zones/localnetwork/<bridge> for every network device's
// plain Linux bridge. s.mu is held.
func (s *Server) bridgeChecks(tk *token, config map[string]string) error {
	for k, val := range config {
		if !strings.HasPrefix(k, "net") {
			continue
		}
		for _, part := range strings.Split(val, ",") {
			if bridge, ok := strings.CutPrefix(part, "bridge="); ok {
				if err := s.check(tk, "/sdn/zones/localnetwork/"+bridge, "SDN.Use"); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// storageChecks are qemu-server's checks on the storages a config change
// uses: Datastore.AllocateSpace where a new disk is allocated, read access
// (AllocateSpace or Audit) to an ISO. s.mu is held.
func (s *Server) storageChecks(tk *token, set map[string]string) error {
	for k, val := range set {
		if !diskKey.MatchString(k) || val == "none" || strings.HasPrefix(val, "none,") {
			continue
		}
		vol, _, _ := strings.Cut(val, ",")
		sid, rest, ok := strings.Cut(vol, ":")
		if !ok {
			continue
		}
		path := "/storage/" + sid
		if strings.Contains(val, "media=cdrom") {
			if err := s.checkAny(tk, path, "Datastore.AllocateSpace", "Datastore.Audit"); err != nil {
				return err
			}
		} else if _, err := strconv.ParseFloat(rest, 64); err == nil {
			if err := s.check(tk, path, "Datastore.AllocateSpace"); err != nil {
				return err
			}
		}
	}
	return nil
}

func (s *Server) isoExists(volid string) bool {
	for _, st := range s.storages {
		for _, iso := range st.isos {
			if iso.VolID == volid {
				return true
			}
		}
	}
	return false
}

// applyConfig sets and deletes keys, allocating new disks. s.mu is held.
func (s *Server) applyConfig(v *vm, set map[string]string, del []string) error {
	keys := make([]string, 0, len(set))
	for k := range set {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		val, err := s.allocDisk(v, k, set[k])
		if err != nil {
			return err
		}
		v.config[k] = val
	}
	for _, k := range del {
		delete(v.config, k)
	}
	s.publishLocked(v)
	return nil
}

// putConfig is the synchronous PUT .../config.
func (s *Server) putConfig(c *call) (any, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, err := s.vmFor(c, "VM.Audit")
	if err != nil {
		return nil, err
	}
	if err := lockedError(v); err != nil {
		return nil, err
	}
	set, del, err := s.configChanges(c, fmt.Sprintf("/vms/%d", v.id))
	if err != nil {
		return nil, err
	}
	return nil, s.applyConfig(v, set, del)
}

// postConfig is the asynchronous POST .../config: a qmconfig task.
func (s *Server) postConfig(c *call) (any, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, err := s.vmFor(c, "VM.Audit")
	if err != nil {
		return nil, err
	}
	if err := lockedError(v); err != nil {
		return nil, err
	}
	set, del, err := s.configChanges(c, fmt.Sprintf("/vms/%d", v.id))
	if err != nil {
		return nil, err
	}
	return s.startTask(c, v.node, "qmconfig", strconv.Itoa(v.id), func() error { return s.applyConfig(v, set, del) }, nil), nil
}

func (s *Server) statusCurrent(c *call) (any, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, err := s.vmFor(c, "VM.Audit")
	if err != nil {
		return nil, err
	}
	out := map[string]any{"vmid": v.id, "name": v.name(), "status": "stopped", "qmpstatus": "stopped",
		"agent": b2i(v.agentEnabled()), "cpus": 2, "maxmem": 2147483648, "uptime": 0}
	if v.running {
		out["status"] = "running"
		out["qmpstatus"] = map[bool]string{true: "paused", false: "running"}[v.paused]
		out["uptime"] = int(time.Since(v.startedAt).Seconds())
	}
	if v.template() {
		out["template"] = 1
	}
	if v.lock != "" {
		out["lock"] = v.lock
	}
	return out, nil
}

func (s *Server) start(c *call) (any, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, err := s.vmFor(c, "VM.PowerMgmt")
	if err != nil {
		return nil, err
	}
	switch {
	case v.template():
		return nil, fail(500, "you can't start a vm if it's a template")
	case v.running:
		return nil, fail(500, "VM %d already running", v.id)
	}
	if err := lockedError(v); err != nil {
		return nil, err
	}
	return s.startTask(c, v.node, "qmstart", strconv.Itoa(v.id), func() error {
		v.running, v.paused, v.startedAt = true, false, time.Now()
		s.publishLocked(v)
		return nil
	}, nil), nil
}

// stop is the hard stop; stopping a stopped VM is a task that does nothing.
func (s *Server) stop(c *call) (any, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, err := s.vmFor(c, "VM.PowerMgmt")
	if err != nil {
		return nil, err
	}
	return s.startTask(c, v.node, "qmstop", strconv.Itoa(v.id), s.powerOff(v), nil), nil
}

// powerOff is the task body of stop and shutdown.
func (s *Server) powerOff(v *vm) func() error {
	return func() error {
		v.running, v.paused = false, false
		s.dropConsolesOfLocked(v.id) // QEMU exits, and its VNC server with it
		s.publishLocked(v)
		return nil
	}
}

// shutdown is the ACPI (or agent) shutdown; the model's guests always obey.
func (s *Server) shutdown(c *call) (any, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, err := s.vmFor(c, "VM.PowerMgmt")
	if err != nil {
		return nil, err
	}
	if _, err := c.integer("timeout", 0); err != nil {
		return nil, err
	}
	if _, err := c.boolean("forceStop", false); err != nil {
		return nil, err
	}
	if !v.running {
		return nil, fail(500, "VM %d not running", v.id)
	}
	return s.startTask(c, v.node, "qmshutdown", strconv.Itoa(v.id), s.powerOff(v), nil), nil
}

func (s *Server) clone(c *call) (any, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	src, err := s.vmFor(c, "VM.Clone")
	if err != nil {
		return nil, err
	}
	newid, err := c.integer("newid", 0)
	if err != nil {
		return nil, err
	}
	if newid < 100 {
		return nil, paramError("newid", "property is missing and it is not optional")
	}
	full, err := c.boolean("full", !src.template())
	if err != nil {
		return nil, err
	}
	poolID, target := c.str("pool"), c.str("target")
	if target == "" {
		target = src.node
	} else if err := s.nodeExists(target); err != nil {
		return nil, err
	}
	if err := s.allocateCheck(c.tok, poolID, newid); err != nil {
		return nil, err
	}
	if _, taken := s.vms[newid]; taken {
		return nil, fail(500, "unable to create VM %d: config file already exists", newid)
	}
	if !full && !src.template() {
		return nil, fail(500, "Linked clone feature is not available for drive 'scsi0'")
	}
	if err := s.bridgeChecks(c.tok, src.config); err != nil {
		return nil, err
	}
	for k, val := range src.config { // check_storage_access_clone
		if !diskKey.MatchString(k) || strings.Contains(val, "media=cdrom") {
			continue
		}
		sid, _, _ := strings.Cut(val, ":")
		if st := c.str("storage"); st != "" {
			sid = st
		}
		if err := s.check(c.tok, "/storage/"+sid, "Datastore.AllocateSpace"); err != nil {
			return nil, err
		}
	}
	if err := lockedError(src); err != nil {
		return nil, err
	}
	name := c.str("name")
	if name == "" {
		name = "Copy-of-VM-" + src.name()
	}
	if !validDNSName(name) {
		return nil, paramError("name", "invalid format - value does not look like a valid DNS name")
	}
	// Like qemu-server, the clone joins its pool only as the last step of
	// the task: until then only a token with rights on /vms (or root)
	// sees it.
	nv := &vm{id: newid, node: target, config: maps.Clone(src.config), lock: "clone"}
	delete(nv.config, "template")
	nv.config["name"] = name
	for k, val := range nv.config {
		if !diskKey.MatchString(k) || strings.Contains(val, "media=cdrom") {
			continue
		}
		vol, opts, _ := strings.Cut(val, ",")
		st, _, _ := strings.Cut(vol, ":")
		disk := fmt.Sprintf("%s:vm-%d-disk-%d", st, newid, nv.nextDisk)
		if !full {
			disk = vol + "/" + strings.TrimPrefix(disk, st+":")
		}
		nv.nextDisk++
		nv.config[k] = disk + "," + opts
	}
	s.vms[newid] = nv
	s.publishLocked(nv)
	var copying time.Duration
	if full {
		copying = s.copyTime(src)
	}
	return s.startTaskFor(c, src.node, "qmclone", strconv.Itoa(src.id), newid, copying, func() error {
		nv.lock, nv.pool = "", poolID
		s.publishLocked(nv)
		return nil
	}, func() { s.removeVM(nv) }), nil
}

// copyTime is how long a full clone of v copies its disks at CopyRate.
// s.mu is held.
func (s *Server) copyTime(v *vm) time.Duration {
	var bytes float64
	for k, val := range v.config {
		if diskKey.MatchString(k) && !strings.Contains(val, "media=cdrom") {
			bytes += max(0, diskSizeGB(val)) * (1 << 30)
		}
	}
	return time.Duration(bytes / float64(s.opts.CopyRate) * float64(time.Second))
}

var dnsName = regexp.MustCompile(`^(?i)[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*$`)

func validDNSName(n string) bool { return len(n) <= 63 && dnsName.MatchString(n) }

// allocateCheck is PVE's check for a new VM: VM.Allocate on the pool, or
// on /vms/ID without one, and the pool must exist. s.mu is held.
func (s *Server) allocateCheck(tk *token, poolID string, vmid int) error {
	if poolID == "" {
		return s.checkVM(tk, vmid, "VM.Allocate")
	}
	if err := s.check(tk, "/pool/"+poolID, "VM.Allocate"); err != nil {
		return err
	}
	if s.pools[poolID] == nil {
		return fail(500, "pool '%s' does not exist", poolID)
	}
	return nil
}

func (s *Server) removeVM(v *vm) {
	delete(s.vms, v.id)
	s.publishGoneLocked(v.id)
}

// create is POST /nodes/{node}/qemu.
func (s *Server) create(c *call) (any, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	node := c.vars["node"]
	if err := s.nodeExists(node); err != nil {
		return nil, err
	}
	vmid, err := c.integer("vmid", 0)
	if err != nil {
		return nil, err
	}
	if vmid < 100 {
		return nil, paramError("vmid", "property is missing and it is not optional")
	}
	poolID := c.str("pool")
	if err := s.allocateCheck(c.tok, poolID, vmid); err != nil {
		return nil, err
	}
	if _, taken := s.vms[vmid]; taken {
		return nil, fail(500, "unable to create VM %d: config file already exists", vmid)
	}
	if name := c.str("name"); name != "" && !validDNSName(name) {
		return nil, paramError("name", "invalid format - value does not look like a valid DNS name")
	}
	path := fmt.Sprintf("/vms/%d", vmid)
	if poolID != "" {
		path = "/pool/" + poolID
	}
	set, _, err := s.configChanges(c, path)
	if err != nil {
		return nil, err
	}
	// The new VM joins its pool at the end of the task, as with a clone.
	v := &vm{id: vmid, node: node, config: map[string]string{}, lock: "create"}
	s.vms[vmid] = v
	if err := s.applyConfig(v, set, nil); err != nil {
		delete(s.vms, vmid)
		return nil, err
	}
	return s.startTask(c, node, "qmcreate", strconv.Itoa(vmid), func() error {
		v.lock, v.pool = "", poolID
		s.publishLocked(v)
		return nil
	}, func() { s.removeVM(v) }), nil
}

func (s *Server) destroy(c *call) (any, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, err := s.vmFor(c, "VM.Allocate")
	if err != nil {
		return nil, err
	}
	for _, p := range []string{"purge", "destroy-unreferenced-disks", "skiplock"} {
		if _, err := c.boolean(p, false); err != nil {
			return nil, err
		}
	}
	if v.running {
		return nil, fail(500, "VM %d is running - destroy failed", v.id)
	}
	if err := lockedError(v); err != nil {
		return nil, err
	}
	v.lock = "destroyed"
	return s.startTask(c, v.node, "qmdestroy", strconv.Itoa(v.id), func() error {
		s.removeVM(v)
		return nil
	}, func() { v.lock = "" }), nil
}

var snapName = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_\-]{1,39}$`)

func (s *Server) snapshotList(c *call) (any, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, err := s.vmFor(c, "VM.Audit")
	if err != nil {
		return nil, err
	}
	out := []map[string]any{}
	parent := ""
	for _, sn := range v.snapshots {
		row := map[string]any{"name": sn.name, "description": sn.description, "snaptime": sn.taken.Unix(),
			"vmstate": b2i(sn.vmstate)}
		if sn.parent != "" {
			row["parent"] = sn.parent
		}
		out = append(out, row)
		parent = sn.name
	}
	cur := map[string]any{"name": "current", "description": "You are here!", "running": b2i(v.running)}
	if parent != "" {
		cur["parent"] = parent
	}
	return append(out, cur), nil
}

func (s *Server) snapshotCreate(c *call) (any, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, err := s.vmFor(c, "VM.Snapshot")
	if err != nil {
		return nil, err
	}
	name, err := c.required("snapname")
	if err != nil {
		return nil, err
	}
	if !snapName.MatchString(name) || name == "current" || name == "vzdump" {
		return nil, paramError("snapname", "invalid format - invalid configuration ID '%s'", name)
	}
	vmstate, err := c.boolean("vmstate", false)
	if err != nil {
		return nil, err
	}
	for _, sn := range v.snapshots {
		if sn.name == name {
			return nil, fail(500, "snapshot name '%s' already used", name)
		}
	}
	if err := lockedError(v); err != nil {
		return nil, err
	}
	v.lock = "snapshot"
	return s.startTask(c, v.node, "qmsnapshot", strconv.Itoa(v.id), func() error {
		v.lock = ""
		parent := ""
		if n := len(v.snapshots); n > 0 {
			parent = v.snapshots[n-1].name
		}
		v.snapshots = append(v.snapshots, &snapshot{name: name, description: c.str("description"), parent: parent,
			vmstate: vmstate && v.running, taken: time.Now(), config: maps.Clone(v.config)})
		return nil
	}, func() { v.lock = "" }), nil
}

func (s *Server) rollback(c *call) (any, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, err := s.vmForAny(c, "VM.Snapshot", "VM.Snapshot.Rollback")
	if err != nil {
		return nil, err
	}
	start, err := c.boolean("start", false)
	if err != nil {
		return nil, err
	}
	var sn *snapshot
	for _, x := range v.snapshots {
		if x.name == c.vars["snapname"] {
			sn = x
		}
	}
	if sn == nil {
		return nil, fail(500, "snapshot '%s' does not exist", c.vars["snapname"])
	}
	if err := lockedError(v); err != nil {
		return nil, err
	}
	v.lock = "rollback"
	return s.startTask(c, v.node, "qmrollback", strconv.Itoa(v.id), func() error {
		v.lock = ""
		v.config = maps.Clone(sn.config)
		v.running, v.paused = sn.vmstate || start, false
		if v.running {
			v.startedAt = time.Now()
		}
		s.publishLocked(v)
		return nil
	}, func() { v.lock = "" }), nil
}

// resize is PUT .../resize: a task since qemu-server 8.0.2.
func (s *Server) resize(c *call) (any, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, err := s.vmFor(c, "VM.Config.Disk")
	if err != nil {
		return nil, err
	}
	disk, err := c.required("disk")
	if err != nil {
		return nil, err
	}
	size, err := c.required("size")
	if err != nil {
		return nil, err
	}
	cur, ok := v.config[disk]
	if !ok || !diskKey.MatchString(disk) || strings.Contains(cur, "media=cdrom") {
		return nil, fail(500, "disk '%s' does not exist", disk)
	}
	old := diskSizeGB(cur)
	rel := strings.HasPrefix(size, "+")
	gb := parseSizeGB(strings.TrimPrefix(size, "+"))
	if gb < 0 {
		return nil, paramError("size", "value does not match the regex pattern")
	}
	if rel {
		gb += old
	}
	if gb < old {
		return nil, fail(500, "shrinking disks is not supported")
	}
	sid, _, _ := strings.Cut(cur, ":")
	if err := s.check(c.tok, "/storage/"+sid, "Datastore.AllocateSpace"); err != nil {
		return nil, err
	}
	if err := lockedError(v); err != nil {
		return nil, err
	}
	return s.startTask(c, v.node, "resize", strconv.Itoa(v.id), func() error {
		v.config[disk] = setDiskSize(v.config[disk], gb)
		return nil
	}, nil), nil
}

// sendkey is PUT .../sendkey (not POST).
func (s *Server) sendkey(c *call) (any, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, err := s.vmFor(c, "VM.Console")
	if err != nil {
		return nil, err
	}
	key, err := c.required("key")
	if err != nil {
		return nil, err
	}
	if !v.running {
		return nil, fail(500, "VM %d not running", v.id)
	}
	v.keys = append(v.keys, key)
	return nil, nil
}
