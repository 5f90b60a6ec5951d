package qga

import "testing"

func TestNetworkInterfaces(t *testing.T) {
	c := startAgent(t).dial(t)
	ifaces, err := c.NetworkInterfaces(testContext(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, iface := range ifaces {
		if iface.Name != "lo" {
			continue
		}
		for _, addr := range iface.IPAddresses {
			if addr.Type == "ipv4" && addr.Address == "127.0.0.1" && addr.Prefix == 8 {
				return
			}
		}
		t.Fatalf("lo without 127.0.0.1/8: %+v", iface)
	}
	t.Fatalf("no lo interface in %+v", ifaces)
}
