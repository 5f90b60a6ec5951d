package redfishtest

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path"
	"strings"
	"time"

	"github.com/poligon/poligon/backends/qmp"
)

// maxImage bounds what InsertMedia fetches.
const maxImage = 512 << 20

func (s *Server) cdSlot() reply {
	d := s.d
	s.mu.Lock()
	cd := s.cd
	s.mu.Unlock()
	body := map[string]any{
		"@odata.id": d.cdPath(), "@odata.type": "#VirtualMedia.v1_3_0.VirtualMedia",
		"Id": d.cdSlot, "Name": "Virtual CD", "MediaTypes": []string{"CD", "DVD"},
		"Image": nil, "ImageName": nil, "Inserted": false, "WriteProtected": true,
		"ConnectedVia": "NotConnected", "TransferProtocolType": nil, "TransferMethod": "Stream",
		"Actions": map[string]any{
			"#VirtualMedia.InsertMedia": map[string]string{"target": d.cdPath() + "/Actions/VirtualMedia.InsertMedia"},
			"#VirtualMedia.EjectMedia":  map[string]string{"target": d.cdPath() + "/Actions/VirtualMedia.EjectMedia"},
		},
	}
	if cd.inserted {
		body["Image"], body["ImageName"], body["Inserted"], body["ConnectedVia"] = cd.image, cd.imageName, true, "URI"
		if cd.protocol != "" {
			body["TransferProtocolType"] = cd.protocol
		}
	}
	return ok(body)
}

var insertParams = map[string]bool{"Image": true, "Inserted": true, "WriteProtected": true, "TransferProtocolType": true,
	"TransferMethod": true, "UserName": true, "Password": true, "MediaType": true}

// schemeProtocol is the TransferProtocolType each URL scheme stands for.
var schemeProtocol = map[string]string{"http": "HTTP", "https": "HTTPS", "nfs": "NFS", "smb": "CIFS", "cifs": "CIFS"}

func (s *Server) insertMedia(c *call) reply {
	if rep, ok := s.checkIfMatch(c, s.cdSlot); !ok {
		return rep
	}
	var req map[string]any
	if err := c.json(&req); err != nil {
		return fail(http.StatusBadRequest, s.baseError("MalformedJSON", "The request body submitted was malformed JSON and could not be parsed by the receiving service."))
	}
	for k := range req {
		if !insertParams[k] || (s.d.imageOnly && (k == "Inserted" || k == "WriteProtected")) {
			return fail(http.StatusBadRequest, s.baseError("ActionParameterNotSupported", fmt.Sprintf("The parameter %s for the action VirtualMedia.InsertMedia is not supported on the target resource.", k)))
		}
	}
	image, _ := req["Image"].(string)
	if image == "" {
		return fail(http.StatusBadRequest, s.baseError("ActionParameterMissing", "The action VirtualMedia.InsertMedia requires the parameter Image to be present in the request body."))
	}
	proto, _ := req["TransferProtocolType"].(string)
	if s.d.needsProtocol && proto == "" {
		return fail(http.StatusBadRequest, s.baseError("ActionParameterMissing", "The action VirtualMedia.InsertMedia requires the parameter TransferProtocolType to be present in the request body."))
	}
	u, err := url.Parse(image)
	if err != nil || u.Host == "" {
		return fail(http.StatusBadRequest, s.baseError("ActionParameterValueFormatError", "The value for the parameter Image in the action VirtualMedia.InsertMedia is of a different format than the parameter can accept."))
	}
	if proto != "" && schemeProtocol[strings.ToLower(u.Scheme)] != proto {
		return fail(http.StatusBadRequest, s.baseError("ActionParameterValueConflict", fmt.Sprintf("The TransferProtocolType %s does not match the scheme of the Image URI.", proto)))
	}
	s.mu.Lock()
	inserted := s.cd.inserted
	s.mu.Unlock()
	if inserted {
		return fail(http.StatusConflict, s.baseError("ResourceInUse", "The virtual media device is already in use: eject the image first."))
	}
	user, _ := req["UserName"].(string)
	pass, _ := req["Password"].(string)
	file, err := s.fetch(u, user, pass)
	if err != nil {
		return s.unreachableImage(err)
	}
	ctx, cancel := s.qctx()
	defer cancel()
	err = s.qmpDo(ctx, func(q *qmp.Client) error {
		return q.Execute(ctx, "blockdev-change-medium", map[string]string{
			"id": s.opts.CD, "filename": file, "format": "raw", "read-only-mode": "read-only"}, nil)
	})
	if err != nil {
		os.Remove(file)
		return s.internalError(err)
	}
	u.User = nil
	s.mu.Lock()
	s.cd = mediaState{inserted: true, image: u.String(), imageName: path.Base(u.Path), file: file, protocol: proto}
	s.mu.Unlock()
	return noContent()
}

// unreachableImage is a BMC that could not fetch the image: iDRAC's
// RAC0904, a general error elsewhere.
func (s *Server) unreachableImage(err error) reply {
	if s.d.name == Dell {
		return fail(http.StatusBadRequest, redfishError{Code: "Base.1.8.GeneralError",
			Message:   "A general error has occurred. See ExtendedInfo for more information.",
			MessageID: "IDRAC.2.8.RAC0904", Detail: "Unable to complete the operation because the remote file location is not accessible. (" + err.Error() + ")",
			Resolution: "Make sure the remote file location is accessible and retry the operation."})
	}
	return fail(http.StatusBadRequest, s.baseError("GeneralError", "Unable to mount the remote image: "+err.Error()))
}

// fetch downloads the image into the fake's directory, as sushy-tools does
// before it hands the file to the hypervisor. Only http(s) is served here.
func (s *Server) fetch(u *url.URL, user, pass string) (string, error) {
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", fmt.Errorf("%s images cannot be reached from this BMC", u.Scheme)
	}
	if u.User != nil {
		user = u.User.Username()
		pass, _ = u.User.Password()
	}
	clean := *u
	clean.User = nil
	req, err := http.NewRequest(http.MethodGet, clean.String(), nil)
	if err != nil {
		return "", err
	}
	if user != "" {
		req.SetBasicAuth(user, pass)
	}
	client := &http.Client{Timeout: 60 * time.Second,
		// BMCs cannot follow redirects (bmcctl's README); neither can this one.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := client.Do(req)
	if err != nil {
		return "", fmt.Errorf("fetching %s: %v", clean.Redacted(), errWithoutURL(err))
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return "", fmt.Errorf("fetching %s: HTTP %d", clean.Redacted(), res.StatusCode)
	}
	f, err := os.CreateTemp(s.imageDir, "image-*.iso")
	if err != nil {
		return "", err
	}
	n, err := io.Copy(f, io.LimitReader(res.Body, maxImage+1))
	f.Close()
	if err == nil && n > maxImage {
		err = fmt.Errorf("the image is larger than %d bytes", maxImage)
	}
	if err != nil {
		os.Remove(f.Name())
		return "", err
	}
	return f.Name(), nil
}

func errWithoutURL(err error) error {
	if ue, ok := err.(*url.Error); ok {
		return ue.Err
	}
	return err
}

func (s *Server) ejectMedia(c *call) reply {
	if rep, ok := s.checkIfMatch(c, s.cdSlot); !ok {
		return rep
	}
	s.mu.Lock()
	cd := s.cd
	s.mu.Unlock()
	if !cd.inserted {
		return fail(http.StatusBadRequest, s.baseError("ActionNotSupported", "No virtual media image is connected to this device."))
	}
	ctx, cancel := s.qctx()
	defer cancel()
	err := s.qmpDo(ctx, func(q *qmp.Client) error {
		return q.Eject(ctx, s.opts.CD, true)
	})
	if err != nil {
		return s.internalError(err)
	}
	os.Remove(cd.file)
	s.mu.Lock()
	s.cd = mediaState{}
	s.mu.Unlock()
	return noContent()
}
