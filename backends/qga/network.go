package qga

import "context"

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
