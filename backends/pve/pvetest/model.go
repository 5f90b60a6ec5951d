package pvetest

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// VM describes a VM to add (AddVM) and is what VM answers about one.
type VM struct {
	VMID     int
	Name     string
	Node     string // default: the first node
	Pool     string
	Template bool
	Running  bool
	// Config holds extra or overriding config keys (memory, scsi1, agent,
	// ...); VM answers the whole config.
	Config map[string]string

	// Answered by VM only.
	Status    string // running, stopped, paused
	Lock      string
	Snapshots []string
	Keys      []string // keys sent with sendkey, in order
}

type vm struct {
	id        int
	node      string
	pool      string
	config    map[string]string
	running   bool
	paused    bool
	startedAt time.Time
	lock      string
	snapshots []*snapshot
	agentDown bool
	unknown   bool // /cluster/resources has no RRD data for it
	keys      []string
	nextDisk  int
}

type snapshot struct {
	name, description, parent string
	vmstate                   bool
	taken                     time.Time
	config                    map[string]string
}

func (v *vm) name() string       { return v.config["name"] }
func (v *vm) template() bool     { return v.config["template"] == "1" }
func (v *vm) agentEnabled() bool { return agentOn(v.config["agent"]) }

func (v *vm) status() string {
	switch {
	case v.running && v.paused:
		return "paused"
	case v.running:
		return "running"
	}
	return "stopped"
}

func agentOn(opt string) bool {
	for _, part := range strings.Split(opt, ",") {
		k, val, found := strings.Cut(part, "=")
		if !found {
			val, k = k, "enabled"
		}
		if k == "enabled" {
			return val == "1"
		}
	}
	return false
}

type pool struct {
	id, comment string
	storages    map[string]bool // storage members
}

type storage struct {
	name, content, typ string
	isos               []ISO
}

// ISO is an installer image in a storage.
type ISO struct {
	VolID string
	Size  int64
}

// AddPool creates a pool.
func (s *Server) AddPool(poolid string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pools[poolid] = &pool{id: poolid, comment: "pvetest pool " + poolid, storages: map[string]bool{}}
}

// AddPoolStorage makes a storage a member of a pool: the pool's
// privileges then apply to it, as to its VMs.
func (s *Server) AddPoolStorage(poolid, storage string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.pools[poolid]
	if !ok || !s.storageExists(storage) {
		s.t.Fatalf("pvetest: no pool %q or storage %q", poolid, storage)
	}
	p.storages[storage] = true
}

func (s *Server) storageExists(name string) bool {
	for _, st := range s.storages {
		if st.name == name {
			return true
		}
	}
	return false
}

// AddISO puts an ISO into a storage ("local" holds ISOs by default);
// volid is STORAGE:iso/NAME.
func (s *Server) AddISO(volid string, size int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	name, _, _ := strings.Cut(volid, ":")
	for _, st := range s.storages {
		if st.name == name {
			st.isos = append(st.isos, ISO{VolID: volid, Size: size})
			return
		}
	}
	s.t.Fatalf("pvetest: no storage %q for ISO %s", name, volid)
}

// AddTemplate adds a stopped template VM with one disk.
func (s *Server) AddTemplate(vmid int, name string) {
	s.AddVM(VM{VMID: vmid, Name: name, Template: true})
}

// AddVM adds a VM as if it had always been there (it is visible in
// /cluster/resources at once, lag or not).
func (s *Server) AddVM(spec VM) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.vms[spec.VMID]; ok || spec.VMID < 100 {
		s.t.Fatalf("pvetest: vmid %d is taken or below 100", spec.VMID)
	}
	if spec.Node == "" {
		spec.Node = s.opts.Nodes[0]
	}
	if !slices.Contains(s.opts.Nodes, spec.Node) {
		s.t.Fatalf("pvetest: no node %q", spec.Node)
	}
	if spec.Pool != "" && s.pools[spec.Pool] == nil {
		s.t.Fatalf("pvetest: no pool %q", spec.Pool)
	}
	v := &vm{id: spec.VMID, node: spec.Node, pool: spec.Pool, config: defaultConfig(spec.Name)}
	prefix := "vm"
	if spec.Template {
		v.config["template"] = "1"
		prefix = "base"
	}
	v.config["scsi0"] = fmt.Sprintf("local-lvm:%s-%d-disk-0,size=8G", prefix, spec.VMID)
	v.nextDisk = 1
	maps.Copy(v.config, spec.Config)
	if spec.Running && !spec.Template {
		v.running, v.startedAt = true, time.Now().Add(-time.Hour)
	}
	s.vms[v.id] = v
	s.history = append(s.history, resourceVersion{vmid: v.id, row: s.rowLocked(v)}) // at zero: always visible
}

func defaultConfig(name string) map[string]string {
	return map[string]string{
		"name": name, "memory": "2048", "cores": "2", "sockets": "1", "ostype": "l26",
		"scsihw": "virtio-scsi-single", "net0": "virtio=BC:24:11:00:00:01,bridge=vmbr0",
		"boot": "order=scsi0", "agent": "1", "vmgenid": randomHex(4),
	}
}

// VM answers the current state of a VM (not lagged) and whether it exists.
func (s *Server) VM(vmid int) (VM, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.vms[vmid]
	if !ok {
		return VM{}, false
	}
	out := VM{VMID: v.id, Name: v.name(), Node: v.node, Pool: v.pool, Template: v.template(),
		Running: v.running, Config: maps.Clone(v.config), Status: v.status(), Lock: v.lock,
		Keys: slices.Clone(v.keys)}
	for _, sn := range v.snapshots {
		out.Snapshots = append(out.Snapshots, sn.name)
	}
	return out, true
}

// VMIDs answers every vmid, sorted.
func (s *Server) VMIDs() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := slices.Collect(maps.Keys(s.vms))
	sort.Ints(ids)
	return ids
}

// SetAgentDown makes a VM's guest agent answer "QEMU guest agent is not
// running" (down) or answer again.
func (s *Server) SetAgentDown(vmid int, down bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if v, ok := s.vms[vmid]; ok {
		v.agentDown = down
	}
}

// SetResourceUnknown makes a VM's /cluster/resources row status "unknown"
// with no name, as when its RRD data is missing.
func (s *Server) SetResourceUnknown(vmid int, unknown bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if v, ok := s.vms[vmid]; ok {
		v.unknown = unknown
		s.publishLocked(v)
	}
}

// vmAt finds a VM on node, with PVE's error for a missing config.
func (s *Server) vmAt(node string, vmid int) (*vm, error) {
	v, ok := s.vms[vmid]
	if !ok || v.node != node {
		return nil, fail(500, "Configuration file 'nodes/%s/qemu-server/%d.conf' does not exist", node, vmid)
	}
	return v, nil
}

func (s *Server) nodeExists(node string) error {
	if !slices.Contains(s.opts.Nodes, node) {
		return fail(500, "hostname lookup '%s' failed - failed to get address info for: %s: Name or service not known", node, node)
	}
	return nil
}

var diskKey = regexp.MustCompile(`^(scsi|virtio|sata|ide|efidisk|tpmstate)\d+$`)

// allocDisk turns a new-disk value "STORAGE:SIZE[,opts]" into the allocated
// volume "STORAGE:vm-ID-disk-N,size=SIZEG[,opts]"; other values pass.
func (s *Server) allocDisk(v *vm, key, value string) (string, error) {
	if !diskKey.MatchString(key) || strings.Contains(value, "media=cdrom") || value == "none" {
		return value, nil
	}
	vol, opts, _ := strings.Cut(value, ",")
	st, size, ok := strings.Cut(vol, ":")
	if !ok {
		return "", paramError(key, "invalid format - unable to parse volume ID '%s'", vol)
	}
	gb, err := strconv.ParseFloat(size, 64)
	if err != nil {
		return value, nil // an existing volume
	}
	if !s.storageHas(st, "images") {
		return "", fail(500, "storage '%s' does not support content-type 'images'", st)
	}
	out := fmt.Sprintf("%s:vm-%d-disk-%d,size=%sG", st, v.id, v.nextDisk, strconv.FormatFloat(gb, 'f', -1, 64))
	if strings.HasPrefix(key, "efidisk") {
		out = fmt.Sprintf("%s:vm-%d-disk-%d,size=4M", st, v.id, v.nextDisk)
	}
	v.nextDisk++
	if opts != "" {
		out += "," + opts
	}
	return out, nil
}

func (s *Server) storageHas(name, content string) bool {
	for _, st := range s.storages {
		if st.name == name {
			return slices.Contains(strings.Split(st.content, ","), content)
		}
	}
	return false
}

// diskSizeGB reads size=NG (or M/T) from a disk value.
func diskSizeGB(value string) float64 {
	for _, part := range strings.Split(value, ",") {
		if sz, ok := strings.CutPrefix(part, "size="); ok {
			return parseSizeGB(sz)
		}
	}
	return 0
}

func parseSizeGB(sz string) float64 {
	if sz == "" {
		return -1
	}
	mult := map[byte]float64{'K': 1.0 / (1 << 20), 'M': 1.0 / 1024, 'G': 1, 'T': 1024}
	unit := sz[len(sz)-1]
	m, ok := mult[unit]
	if ok {
		sz = sz[:len(sz)-1]
	} else {
		m = 1.0 / (1 << 30) // bytes
	}
	n, err := strconv.ParseFloat(sz, 64)
	if err != nil {
		return -1
	}
	return n * m
}

func setDiskSize(value string, gb float64) string {
	parts := strings.Split(value, ",")
	for i, p := range parts {
		if strings.HasPrefix(p, "size=") {
			parts[i] = "size=" + strconv.FormatFloat(gb, 'f', -1, 64) + "G"
		}
	}
	return strings.Join(parts, ",")
}
