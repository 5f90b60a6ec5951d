package redfishtest

import (
	"crypto/x509/pkix"
	"net/http"
)

// Dialect is the vendor a fake imitates.
type Dialect string

const (
	// Dell is an iDRAC9 with firmware 6.x: ids System.Embedded.1 and
	// iDRAC.Embedded.1, virtual media under the System (moved there in
	// 6.00.02), eight sessions and then 503 RAC0218, PowerCycle among its
	// reset types, the OEM ExportServerScreenShot action, a certificate
	// for the address it serves.
	Dell Dialect = "dell"
	// MegaRAC is an AMI MegaRAC SP-X: ids Self, virtual media under the
	// Manager and empty until the OEM EnableRMedia action, InsertMedia
	// that requires TransferProtocolType, PATCH that requires If-Match,
	// four sessions, no PowerCycle, and AMI's factory certificate
	// (CN=ami.com, OU=MEGARAC), which names no address.
	MegaRAC Dialect = "megarac"
	// Supermicro is an X12-class Redfish 1.14 BMC: ids 1, virtual media
	// under the Manager, InsertMedia that refuses the Inserted and
	// WriteProtected parameters, and the fused reset type
	// "GracefulShutdownGracefulRestart" its firmware publishes.
	Supermicro Dialect = "supermicro"
)

// dialect is everything that differs between vendors.
type dialect struct {
	name         Dialect
	systemID     string
	managerID    string
	manufacturer string
	model        string
	resetTypes   []string
	bootTargets  []string
	sessionLimit int
	// limitError is the refusal of a session over the limit.
	limitStatus int
	limitError  redfishError
	// loginError is the refusal of wrong credentials.
	loginError redfishError
	// mediaOnSystem: the VirtualMedia collection hangs off the System
	// (iDRAC >= 6.00.02), else off the Manager.
	mediaOnSystem bool
	cdSlot        string
	// rmediaGate: the collection is empty until EnableRMedia (AMI).
	rmediaGate bool
	// needsProtocol: InsertMedia without TransferProtocolType is 400.
	needsProtocol bool
	// imageOnly: InsertMedia with Inserted or WriteProtected is 400.
	imageOnly bool
	// patchNeedsIfMatch: a PATCH without If-Match is 428.
	patchNeedsIfMatch bool
	screenshot        bool
	subject           pkix.Name
	dnsNames          []string
	forLoopback       bool
}

var dialects = map[Dialect]*dialect{
	Dell: {
		name: Dell, systemID: "System.Embedded.1", managerID: "iDRAC.Embedded.1",
		manufacturer: "Dell Inc.", model: "PowerEdge R650",
		// bmclib fixture dell/system.embedded.1.json
		resetTypes:   []string{"On", "ForceOff", "ForceRestart", "GracefulRestart", "GracefulShutdown", "PushPowerButton", "Nmi", "PowerCycle"},
		bootTargets:  []string{"None", "Pxe", "Floppy", "Cd", "Hdd", "BiosSetup", "Utilities", "UefiTarget", "SDCard", "UefiHttp"},
		sessionLimit: 8,
		limitStatus:  http.StatusServiceUnavailable,
		limitError: redfishError{Code: "Base.1.8.GeneralError", Message: "A general error has occurred. See ExtendedInfo for more information.",
			MessageID: "IDRAC.2.8.RAC0218", Detail: "The maximum number of user sessions is reached.",
			Resolution: "Close one or more sessions and retry the operation."},
		loginError: redfishError{Code: "Base.1.8.GeneralError", Message: "A general error has occurred. See ExtendedInfo for more information.",
			MessageID: "IDRAC.2.8.SYS415", Detail: "Unable to complete the operation because an invalid username and/or password is entered, and therefore authentication failed.",
			Resolution: "Enter valid user name and password and retry the operation."},
		mediaOnSystem: true, cdSlot: "1",
		screenshot: true,
		subject:    pkix.Name{CommonName: "idrac-fake", Organization: []string{"Dell Inc."}},
		// A site that gives its iDRAC a certificate for its address.
		forLoopback: true,
	},
	MegaRAC: {
		name: MegaRAC, systemID: "Self", managerID: "Self",
		manufacturer: "ASRockRack", model: "W680D4U",
		// Gigabyte/AMI Redfish spec lists these for resets; no PowerCycle.
		resetTypes:   []string{"On", "ForceOff", "GracefulShutdown", "ForceRestart"},
		bootTargets:  []string{"None", "Pxe", "Cd", "Usb", "Hdd", "BiosSetup"},
		sessionLimit: 4,
		limitStatus:  http.StatusServiceUnavailable,
		limitError: redfishError{Code: "Base.1.12.SessionLimitExceeded",
			Message:   "The session establishment failed due to the number of simultaneous sessions exceeding the limit of the implementation.",
			MessageID: "Base.1.12.SessionLimitExceeded", Resolution: "Reduce the number of other sessions before trying to establish the session or increase the limit of simultaneous sessions (if supported)."},
		loginError: redfishError{Code: "Base.1.12.GeneralError", Message: "A general error has occurred. See Resolution for information on how to resolve the error.",
			MessageID: "Base.1.12.NoValidSession", Detail: "There is no valid session established with the implementation.",
			Resolution: "Establish a session before attempting any operations."},
		cdSlot: "CD1", rmediaGate: true, needsProtocol: true, patchNeedsIfMatch: true,
		subject:  pkix.Name{CommonName: "ami.com", OrganizationalUnit: []string{"MEGARAC"}, Organization: []string{"American Megatrends Inc"}},
		dnsNames: []string{"ami.com"},
	},
	Supermicro: {
		name: Supermicro, systemID: "1", managerID: "1",
		manufacturer: "Supermicro", model: "X12STH-SYS",
		// bmclib fixture smc_1.14.0_systems_1.json, fused value and all.
		resetTypes:   []string{"On", "ForceOff", "GracefulShutdownGracefulRestart", "ForceRestart", "Nmi", "ForceOn"},
		bootTargets:  []string{"None", "Pxe", "Hdd", "Usb", "Cd", "BiosSetup", "UsbCd", "UefiBootNext"},
		sessionLimit: 8,
		limitStatus:  http.StatusServiceUnavailable,
		limitError: redfishError{Code: "Base.1.4.SessionLimitExceeded",
			Message:   "The session establishment failed due to the number of simultaneous sessions exceeding the limit of the implementation.",
			MessageID: "Base.1.4.SessionLimitExceeded"},
		loginError: redfishError{Code: "Base.1.4.NoValidSession", Message: "There is no valid session established with the implementation.",
			MessageID: "Base.1.4.NoValidSession"},
		cdSlot: "CD1", imageOnly: true,
		subject:     pkix.Name{CommonName: "IPMI", Organization: []string{"Super Micro Computer"}},
		forLoopback: true,
	},
}

func (d *dialect) systemPath() string  { return "/redfish/v1/Systems/" + d.systemID }
func (d *dialect) managerPath() string { return "/redfish/v1/Managers/" + d.managerID }

func (d *dialect) mediaCollection() string {
	if d.mediaOnSystem {
		return d.systemPath() + "/VirtualMedia"
	}
	return d.managerPath() + "/VirtualMedia"
}

func (d *dialect) cdPath() string { return d.mediaCollection() + "/" + d.cdSlot }

const (
	enableRMediaPath = "/Actions/Oem/AMIVirtualMedia.EnableRMedia"
	screenshotPath   = "/redfish/v1/Dell/Managers/iDRAC.Embedded.1/DellLCService/Actions/DellLCService.ExportServerScreenShot"
)
