package qga

import (
	"context"
	"net"

	"github.com/poligon/poligon/backends"
)

// IPAddress is one address of a guest interface; Type is "ipv4" or "ipv6".
type IPAddress struct {
	Type    string `json:"ip-address-type"`
	Address string `json:"ip-address"`
	Prefix  int    `json:"prefix"`
}

// Interface is a guest network interface as guest-network-get-interfaces
// reports it.
type Interface struct {
	Name            string      `json:"name"`
	HardwareAddress string      `json:"hardware-address"`
	IPAddresses     []IPAddress `json:"ip-addresses"`
}

// NetworkInterfaces lists the guest's network interfaces and addresses.
func (c *Client) NetworkInterfaces(ctx context.Context) ([]Interface, error) {
	var ifaces []Interface
	err := c.Execute(ctx, "guest-network-get-interfaces", nil, &ifaces)
	return ifaces, err
}

// Backend answers the interfaces as the tools see them, wherever the
// agent's answer came from (the local socket, or Proxmox's agent API): an
// address that does not parse is left out; an ipv4 one is 4 bytes long.
func Backend(ifs []Interface) []backends.Interface {
	out := make([]backends.Interface, 0, len(ifs))
	for _, i := range ifs {
		bi := backends.Interface{Name: i.Name, MAC: i.HardwareAddress}
		for _, a := range i.IPAddresses {
			ip := net.ParseIP(a.Address)
			if ip == nil {
				continue
			}
			bits := 128
			if ip4 := ip.To4(); ip4 != nil && a.Type != "ipv6" {
				ip, bits = ip4, 32
			}
			bi.Addresses = append(bi.Addresses, net.IPNet{IP: ip, Mask: net.CIDRMask(a.Prefix, bits)})
		}
		out = append(out, bi)
	}
	return out
}
