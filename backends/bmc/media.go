package bmc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/stmcginnis/gofish/common"
	rf "github.com/stmcginnis/gofish/redfish"

	"github.com/poligon/poligon/backends"
)

// Slot is one virtual drive as the BMC reports it.
type Slot struct {
	ID         string
	Path       string
	MediaTypes []string
	// HasMedia: Inserted, and not reported NotConnected (Supermicro keeps
	// a stale Image in disconnected slots).
	HasMedia       bool
	Image          string // the image's URL, credentials removed
	ConnectedVia   string
	WriteProtected bool
}

// Slots lists the BMC's virtual drives (an AMI lists none until remote
// media is enabled, which MediaMount does).
func (b *Bench) Slots(ctx context.Context) ([]Slot, error) {
	var out []Slot
	err := b.run(ctx, "media list", func(o *op) error {
		vms, err := o.slots()
		if err != nil {
			return err
		}
		for _, v := range vms {
			out = append(out, slotOf(v))
		}
		return nil
	})
	return out, err
}

// MediaList answers the images the BMC's drives present (a BMC keeps no
// images of its own: Name is the URL it reports, Size is unknown, 0) and
// the state of the drive that has media, else of the CD drive.
func (b *Bench) MediaList(ctx context.Context) ([]backends.MediaImage, backends.MediaState, error) {
	slots, err := b.Slots(ctx)
	if err != nil {
		return nil, backends.MediaState{}, err
	}
	images := []backends.MediaImage{}
	var state backends.MediaState
	stateSet := false
	for _, s := range slots {
		if s.HasMedia {
			images = append(images, backends.MediaImage{Name: s.Image})
			if !stateSet {
				state, stateSet = backends.MediaState{Connected: true, Image: s.Image, Mode: slotMode(s.MediaTypes)}, true
			}
		}
	}
	if !stateSet {
		for _, s := range slots {
			if slotMode(s.MediaTypes) == "cd" {
				state = backends.MediaState{Mode: "cd"}
				break
			}
		}
	}
	return images, state, nil
}

func slotOf(v *rf.VirtualMedia) Slot {
	s := Slot{ID: v.ID, Path: v.ODataID, ConnectedVia: string(v.ConnectedVia), WriteProtected: v.WriteProtected,
		HasMedia: v.Inserted && v.ConnectedVia != rf.NotConnectedConnectedVia, Image: redactURL(v.Image)}
	for _, t := range v.MediaTypes {
		s.MediaTypes = append(s.MediaTypes, string(t))
	}
	return s
}

func slotMode(types []string) string {
	switch {
	case slices.Contains(types, "CD") || slices.Contains(types, "DVD"):
		return "cd"
	case slices.Contains(types, "USBStick"):
		return "flash"
	}
	return ""
}

func redactURL(s string) string {
	if u, err := url.Parse(s); err == nil && u.User != nil {
		return u.Redacted()
	}
	return s
}

// protocols are the TransferProtocolType of each image URL scheme.
var protocols = map[string]rf.TransferProtocolType{
	"http": rf.HTTPTransferProtocolType, "https": rf.HTTPSTransferProtocolType,
	"nfs": rf.NFSTransferProtocolType, "smb": rf.CIFSTransferProtocolType, "cifs": rf.CIFSTransferProtocolType,
}

// MediaMount presents an image to the machine: m.URL (or an Image that is a
// URL; a BMC stores none) on the drive of m.Mode, after ejecting what that
// drive held; with BootOnce, the next boot is from it. Credentials in the
// URL travel as InsertMedia's UserName and Password, never in the Image.
func (b *Bench) MediaMount(ctx context.Context, m backends.MediaMount) error {
	mode := m.Mode
	if mode == "" {
		mode = "cd"
	}
	if mode != "cd" && mode != "flash" {
		return backends.WithHint(fmt.Errorf("%s: media mode %q", b.Kind(), m.Mode), "use cd or flash")
	}
	raw := m.URL
	if raw == "" && strings.Contains(m.Image, "://") {
		raw = m.Image
	}
	if raw == "" {
		return backends.WithHint(fmt.Errorf("%s: a BMC keeps no images of its own, so %q names nothing on it", b.Kind(), m.Image),
			"mount from a URL (a storage and a path): the BMC fetches the image itself")
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || protocols[strings.ToLower(u.Scheme)] == "" {
		return backends.WithHint(fmt.Errorf("%s: %q is not an image URL the BMC can fetch", b.Kind(), redactURL(raw)),
			"use an http, https, nfs or smb URL")
	}
	var user, pass string
	if u.User != nil {
		user = u.User.Username()
		pass, _ = u.User.Password()
		u.User = nil
	}
	proto := protocols[strings.ToLower(u.Scheme)]
	image := u.String()
	return b.run(ctx, "media mount "+image, func(o *op) error {
		if pass != "" {
			o.secrets = append(o.secrets, pass)
		}
		slot, err := o.slotFor(mode)
		if err != nil {
			return err
		}
		if slot.Inserted && slot.SupportsMediaEject {
			err := slot.EjectMedia()
			if err != nil && slot.ConnectedVia != rf.NotConnectedConnectedVia {
				return fmt.Errorf("ejecting %s first: %w", redactURL(slot.Image), err)
			}
			// A fresh read: the eject changed the slot's ETag.
			if slot, err = rf.GetVirtualMedia(o.gf, slot.ODataID); err != nil {
				return err
			}
		}
		if err := o.insert(slot, rf.VirtualMediaConfig{Image: image, UserName: user, Password: pass}, proto); err != nil {
			return err
		}
		if m.BootOnce {
			return o.bootOnce(mode)
		}
		return nil
	})
}

// slotFor answers the drive for mode, enabling AMI's remote media first
// when the BMC lists no drive for it.
func (o *op) slotFor(mode string) (*rf.VirtualMedia, error) {
	vms, err := o.slots()
	if err != nil {
		return nil, err
	}
	slot := pick(vms, mode)
	if slot == nil && o.b.d.enableRMedia {
		if err := o.enableRMedia(); err != nil {
			return nil, err
		}
		if vms, err = o.slots(); err != nil {
			return nil, err
		}
		slot = pick(vms, mode)
	}
	if slot == nil {
		var have []string
		for _, v := range vms {
			s := slotOf(v)
			have = append(have, s.ID+" ("+strings.Join(s.MediaTypes, ", ")+")")
		}
		if len(have) == 0 {
			have = []string{"none"}
		}
		return nil, fmt.Errorf("the BMC has no virtual drive for %s media (its drives: %s): %w", mode, strings.Join(have, "; "), backends.ErrUnsupported)
	}
	if !slot.SupportsMediaInsert {
		return nil, fmt.Errorf("the BMC's drive %s has no InsertMedia action: %w", slot.ID, backends.ErrUnsupported)
	}
	return slot, nil
}

func pick(vms []*rf.VirtualMedia, mode string) *rf.VirtualMedia {
	for _, v := range vms {
		if slotMode(slotOf(v).MediaTypes) == mode {
			return v
		}
	}
	// A drive that takes both (some list CD and USBStick together).
	for _, v := range vms {
		types := slotOf(v).MediaTypes
		if (mode == "flash" && slices.Contains(types, "USBStick")) || (mode == "cd" && slices.Contains(types, "CD")) {
			return v
		}
	}
	return nil
}

// slots lists the virtual drives under the System (where DMTF and iDRAC
// 6.x put them) and under its Managers (the older place, and AMI's).
func (o *op) slots() ([]*rf.VirtualMedia, error) {
	sys, err := o.system()
	if err != nil {
		return nil, err
	}
	var out []*rf.VirtualMedia
	seen := map[string]bool{}
	add := func(vms []*rf.VirtualMedia) {
		for _, v := range vms {
			if !seen[v.ODataID] {
				seen[v.ODataID] = true
				out = append(out, v)
			}
		}
	}
	vms, err := sys.VirtualMedia()
	if err != nil {
		return nil, err
	}
	add(vms)
	mgrs, err := o.managers(sys)
	if err != nil {
		return nil, err
	}
	for _, m := range mgrs {
		vms, err := m.VirtualMedia()
		if err != nil {
			return nil, err
		}
		add(vms)
	}
	return out, nil
}

func (o *op) managers(sys *rf.ComputerSystem) ([]*rf.Manager, error) {
	mgrs, err := sys.ManagedBy()
	if err == nil && len(mgrs) > 0 {
		return mgrs, nil
	}
	return o.gf.Service.Managers()
}

// insert sends InsertMedia the way the vendor takes it.
func (o *op) insert(slot *rf.VirtualMedia, cfg rf.VirtualMediaConfig, proto rf.TransferProtocolType) error {
	switch o.b.d.insert {
	case insertProtocol:
		cfg.TransferProtocolType = proto
		return slot.InsertMediaConfig(cfg)
	case insertImageOnly:
		err := slot.InsertMediaConfig(cfg)
		if missingParameter(err) {
			cfg.TransferProtocolType = proto
			err = slot.InsertMediaConfig(cfg)
		}
		return err
	}
	full := cfg
	full.Inserted, full.WriteProtected = true, true
	err := slot.InsertMediaConfig(full)
	if status(err) == http.StatusBadRequest {
		// Some BMCs refuse Inserted/WriteProtected (bmclib's fallback).
		err = slot.InsertMediaConfig(cfg)
		if missingParameter(err) {
			cfg.TransferProtocolType = proto
			err = slot.InsertMediaConfig(cfg)
		}
	}
	return err
}

func status(err error) int {
	var ce *common.Error
	if errors.As(err, &ce) {
		return ce.HTTPReturnedStatusCode
	}
	return 0
}

func missingParameter(err error) bool {
	var ce *common.Error
	if !errors.As(err, &ce) || ce.HTTPReturnedStatusCode != http.StatusBadRequest {
		return false
	}
	if strings.Contains(ce.Code, "ActionParameterMissing") {
		return true
	}
	for _, x := range ce.ExtendedInfos {
		if strings.Contains(x.MessageID, "ActionParameterMissing") {
			return true
		}
	}
	return false
}

// enableRMedia runs AMI's EnableRMedia (found in the Manager's OEM
// actions, else at its usual place); "already enabled" is fine.
func (o *op) enableRMedia() error {
	mgrs, err := o.managers(o.sys)
	if err != nil {
		return err
	}
	if len(mgrs) == 0 {
		return errors.New("the BMC serves no Manager to enable remote media on")
	}
	mgr := mgrs[0]
	var doc struct {
		Actions struct {
			Oem map[string]struct {
				Target string `json:"target"`
			}
		}
	}
	json.Unmarshal(mgr.RawData, &doc)
	target := doc.Actions.Oem["#AMIVirtualMedia.EnableRMedia"].Target
	if target == "" {
		target = mgr.ODataID + "/Actions/Oem/AMIVirtualMedia.EnableRMedia"
	}
	err = mgr.Post(target, map[string]string{"RMediaState": "Enable"})
	var ce *common.Error
	if errors.As(err, &ce) && strings.Contains(strings.ToLower(errorText(ce)), "already enabled") {
		return nil
	}
	if err != nil {
		return fmt.Errorf("enabling remote media: %w", err)
	}
	return nil
}

func errorText(ce *common.Error) string {
	t := ce.Message
	for _, x := range ce.ExtendedInfos {
		t += " " + x.Message
	}
	return t
}

// bootOnce sets the boot override to the drive of mode, for the next boot
// only. Only the target and Once are sent: BootSourceOverrideMode stays as
// it is (bmclib's SetBootDevice would set UEFI or Legacy).
func (o *op) bootOnce(mode string) error {
	sys, err := o.system() // afresh: its ETag, for If-Match
	if err != nil {
		return err
	}
	target := rf.CdBootSourceOverrideTarget
	if mode == "flash" {
		target = rf.UsbBootSourceOverrideTarget
	}
	var doc struct {
		Boot struct {
			Allowed []string `json:"BootSourceOverrideTarget@Redfish.AllowableValues"`
		}
	}
	json.Unmarshal(sys.RawData, &doc)
	if len(doc.Boot.Allowed) > 0 && !slices.Contains(doc.Boot.Allowed, string(target)) {
		return fmt.Errorf("the image is mounted, but the BMC cannot boot from %s (its boot targets: %s): %w",
			target, strings.Join(doc.Boot.Allowed, ", "), backends.ErrUnsupported)
	}
	return sys.Patch(sys.ODataID, map[string]any{"Boot": map[string]string{
		"BootSourceOverrideTarget":  string(target),
		"BootSourceOverrideEnabled": string(rf.OnceBootSourceOverrideEnabled),
	}})
}

// MediaEject ejects every drive that holds an image; none is fine.
func (b *Bench) MediaEject(ctx context.Context) error {
	return b.run(ctx, "media eject", func(o *op) error {
		vms, err := o.slots()
		if err != nil {
			return err
		}
		for _, v := range vms {
			if !v.Inserted || !v.SupportsMediaEject {
				continue
			}
			if err := v.EjectMedia(); err != nil && v.ConnectedVia != rf.NotConnectedConnectedVia {
				return fmt.Errorf("ejecting %s from %s: %w", redactURL(v.Image), v.ID, err)
			}
		}
		return nil
	})
}
