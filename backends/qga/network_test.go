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

// An ipv4 address comes out 4 bytes long with its prefix; an ipv6 one
// (an IPv4-mapped one too) stays 16; one that does not parse is left out.
func TestBackendInterfaces(t *testing.T) {
	got := Backend([]Interface{{Name: "eth0", HardwareAddress: "52:54:00:00:00:01", IPAddresses: []IPAddress{
		{Type: "ipv4", Address: "10.0.2.15", Prefix: 24},
		{Type: "ipv6", Address: "::ffff:10.0.2.15", Prefix: 96},
		{Type: "ipv6", Address: "fe80::1", Prefix: 64},
		{Type: "ipv4", Address: "not-an-address", Prefix: 8},
	}}})
	if len(got) != 1 || got[0].Name != "eth0" || got[0].MAC != "52:54:00:00:00:01" || len(got[0].Addresses) != 3 {
		t.Fatalf("interfaces = %+v", got)
	}
	for i, want := range []struct{ ip, bits, ones int }{{4, 32, 24}, {16, 128, 96}, {16, 128, 64}} {
		a := got[0].Addresses[i]
		if ones, bits := a.Mask.Size(); len(a.IP) != want.ip || bits != want.bits || ones != want.ones {
			t.Errorf("address %d = %v (%d bytes, /%d of %d), want %d bytes /%d of %d", i, a.IP, len(a.IP), ones, bits, want.ip, want.ones, want.bits)
		}
	}
}
