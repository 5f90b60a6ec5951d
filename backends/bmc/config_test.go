package bmc

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	rf "github.com/stmcginnis/gofish/redfish"
)

func TestNewRefuses(t *testing.T) {
	pin := strings.Repeat("ab", 32)
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"plain http", Config{URL: "http://10.0.0.1", User: "u"}, "plain HTTP"},
		{"credentials in the URL", Config{URL: "https://root:pw@10.0.0.1", User: "u"}, "credentials"},
		{"a path", Config{URL: "https://10.0.0.1/redfish/v1", User: "u"}, "path"},
		{"no user", Config{URL: "https://10.0.0.1"}, "user"},
		{"unknown dialect", Config{URL: "https://10.0.0.1", User: "u", Dialect: "hp"}, "dialect"},
		{"insecure and a pin", Config{URL: "https://10.0.0.1", User: "u", Insecure: true, PinSHA256: pin}, "contradicts"},
		{"a bad pin", Config{URL: "https://10.0.0.1", User: "u", PinSHA256: "abc"}, "SHA-256"},
		{"a missing CA file", Config{URL: "https://10.0.0.1", User: "u", CAFile: "/nonexistent.pem"}, "CA file"},
		{"an HTTP client and a pin", Config{URL: "https://10.0.0.1", User: "u", PinSHA256: pin, HTTP: &http.Client{}}, "HTTP client"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New: %v, want an error about %q", err, tc.want)
			}
		})
	}
	t.Run("DEBUG_BMCLIB", func(t *testing.T) {
		t.Setenv("DEBUG_BMCLIB", "true")
		_, err := New(Config{URL: "https://10.0.0.1", User: "u"})
		if err == nil || !strings.Contains(err.Error(), "DEBUG_BMCLIB") {
			t.Fatalf("New with DEBUG_BMCLIB=true: %v", err)
		}
	})
}

func TestKindAndEndpoint(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		kind string
		host string
		port string
	}{
		{Config{URL: "https://10.0.0.1", User: "u", Dialect: "AMI"}, "bmc megarac https://10.0.0.1:443", "https://10.0.0.1", "443"},
		{Config{Name: "lab", URL: "https://[fd00::1]:8443/", User: "u", Dialect: "idrac"}, "bmc lab (dell https://[fd00::1]:8443)", "https://[fd00::1]", "8443"},
		{Config{URL: "http://bmc.lab", User: "u", Insecure: true}, "bmc redfish http://bmc.lab:80", "http://bmc.lab", "80"},
	} {
		b, err := New(tc.cfg)
		if err != nil {
			t.Fatal(err)
		}
		if b.Kind() != tc.kind || b.ep.host != tc.host || b.ep.port != tc.port {
			t.Errorf("%+v: kind %q host %q port %q", tc.cfg, b.Kind(), b.ep.host, b.ep.port)
		}
	}
	if p, err := normalizePin("AB:" + strings.Repeat("cd", 31)); err != nil || p != "ab"+strings.Repeat("cd", 31) {
		t.Errorf("pin with colons: %q, %v", p, err)
	}
}

func TestAllowsResetTypes(t *testing.T) {
	sys := func(types ...rf.ResetType) *rf.ComputerSystem {
		return &rf.ComputerSystem{SupportedResetTypes: types}
	}
	for _, tc := range []struct {
		sys          *rf.ComputerSystem
		t            rf.ResetType
		exact, loose bool
	}{
		{sys(), rf.PowerCycleResetType, true, true}, // nothing published: gofish sends anything
		{sys("On", "ForceOff"), rf.ForceOffResetType, true, true},
		{sys("On", "ForceOff"), rf.PowerCycleResetType, false, false},
		{sys("On", "GracefulShutdownGracefulRestart"), rf.GracefulShutdownResetType, false, true},
		{sys("On", "GracefulShutdownGracefulRestart"), rf.GracefulRestartResetType, false, true},
		{sys("On", "GracefulShutdownGracefulRestart"), rf.OnResetType, true, true},
		{sys("NotAResetGracefulShutdown"), rf.GracefulShutdownResetType, false, false},
	} {
		exact, loose := allows(tc.sys, tc.t)
		if exact != tc.exact || loose != tc.loose {
			t.Errorf("allows(%v, %s) = %v, %v", tc.sys.SupportedResetTypes, tc.t, exact, loose)
		}
	}
	if got := splitFused("ForceOnForceOff"); !slices.Equal(got, []string{"ForceOn", "ForceOff"}) {
		t.Errorf("splitFused: %v", got)
	}
}

func TestPowerWord(t *testing.T) {
	for in, want := range map[string]string{"On": "on", "PoweringOff": "on", "PoweringOn": "on", "Paused": "on", "Off": "off", "": "unknown", "Chassis Power is on\n": "unknown"} {
		if got := powerWord(in); got != want {
			t.Errorf("powerWord(%q) = %q, want %q", in, got, want)
		}
	}
}
