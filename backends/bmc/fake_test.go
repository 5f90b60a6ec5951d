package bmc

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/poligon/poligon/backends/bmc/redfishtest"
)

// raw is a plain Redfish client for checking the fake's wire behaviour.
type raw struct {
	t     *testing.T
	s     *redfishtest.Server
	c     *http.Client
	token string
}

func (r *raw) do(method, path string, body any, hdr map[string]string) (*http.Response, map[string]any) {
	r.t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, r.s.URL+path, rd)
	if r.token != "" {
		req.Header.Set("X-Auth-Token", r.token)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	res, err := r.c.Do(req)
	if err != nil {
		r.t.Fatal(err)
	}
	defer res.Body.Close()
	var doc map[string]any
	json.NewDecoder(res.Body).Decode(&doc)
	return res, doc
}

func (r *raw) want(status int, method, path string, body any, hdr map[string]string) (*http.Response, map[string]any) {
	r.t.Helper()
	res, doc := r.do(method, path, body, hdr)
	if res.StatusCode != status {
		r.t.Fatalf("%s %s: %d %v, want %d", method, path, res.StatusCode, doc, status)
	}
	return res, doc
}

func (r *raw) login() string {
	r.t.Helper()
	res, _ := r.want(201, "POST", "/redfish/v1/SessionService/Sessions", map[string]string{"UserName": testUser, "Password": testPassword}, nil)
	r.token = res.Header.Get("X-Auth-Token")
	loc := res.Header.Get("Location")
	if r.token == "" || !strings.HasPrefix(loc, "/redfish/v1/SessionService/Sessions/") {
		r.t.Fatalf("login answered token %q, Location %q", r.token, loc)
	}
	return loc
}

func messageID(doc map[string]any) string {
	e, _ := doc["error"].(map[string]any)
	infos, _ := e["@Message.ExtendedInfo"].([]any)
	if len(infos) == 0 {
		return ""
	}
	info, _ := infos[0].(map[string]any)
	id, _ := info["MessageId"].(string)
	return id
}

func TestFakeWire(t *testing.T) {
	machine(t)
	t.Run("sessions and auth", func(t *testing.T) {
		s := startFake(t, redfishtest.Options{Dialect: redfishtest.Dell})
		r := &raw{t: t, s: s, c: rawClient(s)}
		_, root := r.want(200, "GET", "/redfish/v1/", nil, nil)
		links, _ := root["Links"].(map[string]any)
		if _, ok := links["Sessions"]; !ok {
			t.Errorf("service root without Links.Sessions: %v", root)
		}
		res, _ := r.want(401, "GET", "/redfish/v1/Systems/System.Embedded.1", nil, nil)
		if res.Header.Get("WWW-Authenticate") == "" {
			t.Error("401 without WWW-Authenticate")
		}
		_, doc := r.want(401, "POST", "/redfish/v1/SessionService/Sessions", map[string]string{"UserName": testUser, "Password": "wrong"}, nil)
		if messageID(doc) != "IDRAC.2.8.SYS415" {
			t.Errorf("wrong password: %v", doc)
		}
		loc := r.login()
		res, _ = r.want(200, "GET", "/redfish/v1/Systems/System.Embedded.1", nil, nil)
		if res.Header.Get("ETag") == "" {
			t.Error("a system without ETag")
		}
		r.want(204, "DELETE", loc, nil, nil)
		r.want(401, "GET", "/redfish/v1/Systems", nil, nil)
		r.token = ""
		req, _ := http.NewRequest("GET", s.URL+"/redfish/v1/Systems", nil)
		req.SetBasicAuth(testUser, testPassword)
		if res, err := r.c.Do(req); err != nil || res.StatusCode != 200 {
			t.Errorf("basic auth: %v %v", res, err)
		}
	})
	t.Run("megarac", func(t *testing.T) {
		s := startFake(t, redfishtest.Options{Dialect: redfishtest.MegaRAC})
		r := &raw{t: t, s: s, c: rawClient(s)}
		r.login()
		sys := "/redfish/v1/Systems/Self"
		boot := map[string]any{"Boot": map[string]string{"BootSourceOverrideTarget": "Cd", "BootSourceOverrideEnabled": "Once"}}
		r.want(428, "PATCH", sys, boot, nil)
		r.want(412, "PATCH", sys, boot, map[string]string{"If-Match": `W/"000000000000"`})
		res, _ := r.want(200, "GET", sys, nil, nil)
		r.want(204, "PATCH", sys, boot, map[string]string{"If-Match": res.Header.Get("ETag")})
		_, doc := r.want(400, "POST", sys+"/Actions/ComputerSystem.Reset", map[string]string{"ResetType": "PowerCycle"}, nil)
		if !strings.HasSuffix(messageID(doc), "ActionParameterNotSupported") {
			t.Errorf("PowerCycle on a MegaRAC: %v", doc)
		}
		_, coll := r.want(200, "GET", "/redfish/v1/Managers/Self/VirtualMedia", nil, nil)
		if m, _ := coll["Members"].([]any); len(m) != 0 {
			t.Errorf("virtual media before EnableRMedia: %v", coll)
		}
		r.want(404, "GET", "/redfish/v1/Managers/Self/VirtualMedia/CD1", nil, nil)
		enable := "/redfish/v1/Managers/Self/Actions/Oem/AMIVirtualMedia.EnableRMedia"
		r.want(204, "POST", enable, map[string]string{"RMediaState": "Enable"}, nil)
		r.want(400, "POST", enable, map[string]string{"RMediaState": "Enable"}, nil)
		insert := "/redfish/v1/Managers/Self/VirtualMedia/CD1/Actions/VirtualMedia.InsertMedia"
		_, doc = r.want(400, "POST", insert, map[string]any{"Image": "http://127.0.0.1:1/x.iso", "Inserted": true, "WriteProtected": true}, nil)
		if !strings.HasSuffix(messageID(doc), "ActionParameterMissing") {
			t.Errorf("InsertMedia without TransferProtocolType: %v", doc)
		}
	})
	t.Run("supermicro", func(t *testing.T) {
		s := startFake(t, redfishtest.Options{Dialect: redfishtest.Supermicro})
		r := &raw{t: t, s: s, c: rawClient(s)}
		r.login()
		_, doc := r.want(400, "POST", "/redfish/v1/Managers/1/VirtualMedia/CD1/Actions/VirtualMedia.InsertMedia",
			map[string]any{"Image": "http://127.0.0.1:1/x.iso", "Inserted": true}, nil)
		if !strings.HasSuffix(messageID(doc), "ActionParameterNotSupported") {
			t.Errorf("Supermicro InsertMedia with Inserted: %v", doc)
		}
	})
}

// bmclib alone cannot mount on a MegaRAC even with remote media enabled:
// it has no way to send TransferProtocolType (trap 10).
func TestBmclibCannotMountOnMegaRAC(t *testing.T) {
	machine(t)
	s := startFake(t, redfishtest.Options{Dialect: redfishtest.MegaRAC})
	r := &raw{t: t, s: s, c: rawClient(s)}
	loc := r.login()
	r.want(204, "POST", "/redfish/v1/Managers/Self/Actions/Oem/AMIVirtualMedia.EnableRMedia", map[string]string{"RMediaState": "Enable"}, nil)
	r.want(204, "DELETE", loc, nil, nil)

	b := benchFor(t, s, DialectMegaRAC)
	ctx := ctxT(t)
	o := b.newOp(ctx, "bmclib media")
	defer o.close()
	if err := o.client.Open(ctx); err != nil {
		t.Fatal(err)
	}
	if ok, err := o.client.SetVirtualMedia(ctx, "CD", "http://127.0.0.1:1/x.iso"); ok || err == nil {
		t.Fatalf("bmclib's SetVirtualMedia on a MegaRAC: %v, %v; the fake should refuse it", ok, err)
	}
}
