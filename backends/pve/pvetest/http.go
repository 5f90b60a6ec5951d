package pvetest

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// maxBody is pveproxy's limit on a request body.
const maxBody = 512 << 10

// apiError is an error answer: PVE puts the message in the HTTP reason
// phrase and in the body's "message"; parameter errors add "errors".
type apiError struct {
	status int
	msg    string
	params map[string]string
}

func (e *apiError) Error() string { return fmt.Sprintf("%d %s", e.status, e.msg) }

func fail(status int, format string, args ...any) error {
	return &apiError{status: status, msg: fmt.Sprintf(format, args...)}
}

// paramError is PVE's 400 "Parameter verification failed.".
func paramError(name, format string, args ...any) error {
	return &apiError{status: 400, msg: "Parameter verification failed.",
		params: map[string]string{name: fmt.Sprintf(format, args...)}}
}

// call is one API request as a handler sees it.
type call struct {
	r      *http.Request
	w      http.ResponseWriter
	tok    *token
	vars   map[string]string
	params url.Values
}

type route struct {
	method string
	segs   []string
	h      func(c *call) (any, error)
	raw    func(c *call) // answers by itself (the websocket upgrade)
}

func (s *Server) handle(method, pattern string, h func(c *call) (any, error)) route {
	return route{method: method, segs: strings.Split(strings.Trim(pattern, "/"), "/"), h: h}
}

func (rt route) match(method string, segs []string) (map[string]string, bool) {
	if rt.method != method || len(rt.segs) != len(segs) {
		return nil, false
	}
	vars := map[string]string{}
	for i, p := range rt.segs {
		if strings.HasPrefix(p, "{") {
			vars[strings.Trim(p, "{}")] = segs[i]
		} else if p != segs[i] {
			return nil, false
		}
	}
	return vars, true
}

func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	path, ok := strings.CutPrefix(r.URL.Path, "/api2/json")
	if !ok {
		s.writeError(w, &apiError{status: 501, msg: "Unsupported API format (want /api2/json)"})
		return
	}
	path = "/" + strings.Trim(path, "/")
	s.mu.Lock()
	s.hits[r.Method+" "+path]++
	s.mu.Unlock()
	s.logf("%s %s", r.Method, r.URL.RequestURI())

	tok, err := s.authenticate(r)
	if err != nil {
		s.writeError(w, err)
		return
	}
	if err := s.injectedFault(r.Method, path); err != nil {
		s.writeError(w, err)
		return
	}
	segs := strings.Split(strings.Trim(path, "/"), "/")
	for _, rt := range s.routes {
		vars, ok := rt.match(r.Method, segs)
		if !ok {
			continue
		}
		c := &call{r: r, w: w, tok: tok, vars: vars}
		if c.params, err = parseParams(w, r); err != nil {
			s.writeError(w, err)
			return
		}
		if rt.raw != nil {
			rt.raw(c)
			return
		}
		data, err := rt.h(c)
		if err != nil {
			s.writeError(w, err)
			return
		}
		writeData(w, data)
		return
	}
	s.writeError(w, &apiError{status: 501, msg: fmt.Sprintf("Method '%s %s' not implemented", r.Method, path)})
}

// parseParams merges the query string and the body (form-urlencoded or
// JSON) as PVE does; a JSON array becomes repeated values.
func parseParams(w http.ResponseWriter, r *http.Request) (url.Values, error) {
	params := r.URL.Query()
	if r.Body == nil || r.Method == http.MethodGet || r.Method == http.MethodDelete {
		return params, nil
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return nil, fail(413, "Request Entity Too Large")
		}
		return nil, fail(400, "reading the request body: %v", err)
	}
	if len(body) == 0 {
		return params, nil
	}
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	switch ct {
	case "application/json":
		var m map[string]any
		if err := json.Unmarshal(body, &m); err != nil {
			return nil, fail(400, "malformed JSON body: %v", err)
		}
		for k, v := range m {
			addJSONParam(params, k, v)
		}
	default:
		form, err := url.ParseQuery(string(body))
		if err != nil {
			return nil, fail(400, "malformed form body: %v", err)
		}
		for k, vs := range form {
			params[k] = append(params[k], vs...)
		}
	}
	return params, nil
}

func addJSONParam(params url.Values, k string, v any) {
	switch v := v.(type) {
	case nil:
	case bool:
		params.Add(k, map[bool]string{true: "1", false: "0"}[v])
	case float64:
		params.Add(k, strconv.FormatFloat(v, 'f', -1, 64))
	case string:
		params.Add(k, v)
	case []any:
		for _, e := range v {
			addJSONParam(params, k, e)
		}
	default:
		b, _ := json.Marshal(v)
		params.Add(k, string(b))
	}
}

func writeData(w http.ResponseWriter, data any) {
	body, err := json.Marshal(map[string]any{"data": data})
	if err != nil {
		body = []byte(`{"data":null}`)
	}
	w.Header().Set("Content-Type", "application/json;charset=UTF-8")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
}

// writeError answers an error the way pveproxy does: the message is the
// HTTP reason phrase, and the JSON body carries data null, message and any
// parameter errors. Go's server cannot set a reason phrase, so the
// connection is hijacked and the response written by hand.
func (s *Server) writeError(w http.ResponseWriter, err error) {
	var ae *apiError
	if !errors.As(err, &ae) {
		ae = &apiError{status: 500, msg: err.Error()}
	}
	s.logf("-> %d %s %v", ae.status, ae.msg, ae.params)
	doc := map[string]any{"data": nil, "message": ae.msg + "\n"}
	if len(ae.params) > 0 {
		doc["errors"] = ae.params
	}
	body, _ := json.Marshal(doc)
	reason := strings.NewReplacer("\r", " ", "\n", " ").Replace(ae.msg)
	if len(reason) > 200 {
		reason = reason[:200]
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		w.Header().Set("Content-Type", "application/json;charset=UTF-8")
		w.WriteHeader(ae.status)
		_, _ = w.Write(body)
		return
	}
	conn, rw, err := hj.Hijack()
	if err != nil {
		return
	}
	defer conn.Close()
	writeRawResponse(rw.Writer, ae.status, reason, body)
}

func writeRawResponse(w *bufio.Writer, status int, reason string, body []byte) {
	fmt.Fprintf(w, "HTTP/1.1 %03d %s\r\n", status, reason)
	fmt.Fprintf(w, "Content-Type: application/json;charset=UTF-8\r\nContent-Length: %d\r\nConnection: close\r\n\r\n", len(body))
	_, _ = w.Write(body)
	_ = w.Flush()
}

// Parameter accessors with PVE's type checks.

func (c *call) str(name string) string { return c.params.Get(name) }

func (c *call) has(name string) bool { return c.params.Has(name) }

func (c *call) required(name string) (string, error) {
	v := c.params.Get(name)
	if v == "" {
		return "", paramError(name, "property is missing and it is not optional")
	}
	return v, nil
}

func (c *call) integer(name string, def int) (int, error) {
	v := c.params.Get(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, paramError(name, "type check ('integer') failed - got '%s'", v)
	}
	return n, nil
}

func (c *call) boolean(name string, def bool) (bool, error) {
	v := strings.ToLower(c.params.Get(name))
	switch v {
	case "":
		return def, nil
	case "1", "true", "yes", "on":
		return true, nil
	case "0", "false", "no", "off":
		return false, nil
	}
	return false, paramError(name, "type check ('boolean') failed - got '%s'", v)
}

func (c *call) vmid() (int, error) {
	v := c.vars["vmid"]
	n, err := strconv.Atoi(v)
	if err != nil || n < 100 || n > 999999999 {
		return 0, paramError("vmid", "value must be at least 100 (got '%s')", v)
	}
	return n, nil
}
