package engine

import (
	"crypto/x509"
	"errors"

	"github.com/poligon/poligon/backends"
	"github.com/poligon/poligon/backends/pve"
)

// fallbackHint answers a hint for an error that brought none, from the kind
// of failure it is, so that a backend's failure still tells the model what
// to do next.
func fallbackHint(err error) string {
	var api *pve.APIError
	var unknownCA x509.UnknownAuthorityError
	var badCert x509.CertificateInvalidError
	var badHost x509.HostnameError
	switch {
	case errors.As(err, &unknownCA), errors.As(err, &badCert), errors.As(err, &badHost):
		return "the bench's TLS certificate is not trusted: the operator sets ca_file for the bench (or SSL_CERT_FILE / SSL_CERT_DIR) to the CA that signs it"
	case errors.Is(err, pve.ErrNoPool):
		return "ask the Proxmox administrator to grant your token VM.Allocate on a pool (e.g. the PVEVMAdmin role on /pool/<name>)"
	case errors.Is(err, pve.ErrUnreachable):
		return "the Proxmox node did not answer (PVE's 596/502/503): retry in a minute; if it persists the node is down, tell the operator"
	case errors.Is(err, pve.ErrPermission):
		return "the Proxmox token lacks the privilege named above: ask the PVE administrator to grant it on your pool"
	case errors.Is(err, pve.ErrUnauthenticated):
		return "Proxmox refused the token: check X-PVE-Token (HTTP) or the bench's token / PVE_TOKEN (stdio)"
	case errors.Is(err, backends.ErrExists):
		return "the name is taken: pick another one"
	case errors.Is(err, backends.ErrNotFound):
		return "check the name or id above; vm_list_my_vms, vm_list_templates and iso_list list what exists"
	case errors.As(err, &api) && api.Status >= 500:
		return "the message is Proxmox's own: retry once; if it fails again tell the operator (the PVE task log has details)"
	}
	return ""
}
