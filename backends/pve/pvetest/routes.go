package pvetest

// apiRoutes is the API surface the server models.
func (s *Server) apiRoutes() []route {
	const vm = "/nodes/{node}/qemu/{vmid}"
	routes := []route{
		s.handle("GET", "/version", func(*call) (any, error) {
			return map[string]any{"version": "8.2.4", "release": "8.2", "repoid": "pvetest"}, nil
		}),
		s.handle("GET", "/access/permissions", s.permissions),
		s.handle("GET", "/pools", s.poolList),
		s.handle("GET", "/pools/{poolid}", s.poolGet),
		s.handle("GET", "/cluster/resources", s.resources),
		s.handle("GET", "/cluster/nextid", s.nextID),
		s.handle("GET", "/nodes", s.nodeList),
		s.handle("GET", "/nodes/{node}/tasks/{upid}/status", s.taskStatus),
		s.handle("GET", "/nodes/{node}/storage", s.storageList),
		s.handle("GET", "/nodes/{node}/storage/{storage}/content", s.storageContent),
		s.handle("GET", "/nodes/{node}/qemu", s.nodeVMs),
		s.handle("POST", "/nodes/{node}/qemu", s.create),
		s.handle("DELETE", vm, s.destroy),
		s.handle("GET", vm+"/config", s.getConfig),
		s.handle("PUT", vm+"/config", s.putConfig),
		s.handle("POST", vm+"/config", s.postConfig),
		s.handle("GET", vm+"/status/current", s.statusCurrent),
		s.handle("POST", vm+"/status/start", s.start),
		s.handle("POST", vm+"/status/stop", s.stop),
		s.handle("POST", vm+"/status/shutdown", s.shutdown),
		s.handle("POST", vm+"/clone", s.clone),
		s.handle("PUT", vm+"/resize", s.resize),
		s.handle("PUT", vm+"/sendkey", s.sendkey),
		s.handle("GET", vm+"/snapshot", s.snapshotList),
		s.handle("POST", vm+"/snapshot", s.snapshotCreate),
		s.handle("POST", vm+"/snapshot/{snapname}/rollback", s.rollback),
		s.handle("POST", vm+"/agent/ping", s.agentPing),
		s.handle("GET", vm+"/agent/network-get-interfaces", s.agentInterfaces),
		s.handle("POST", vm+"/agent/exec", s.agentExec),
		s.handle("GET", vm+"/agent/exec-status", s.agentExecStatus),
		s.handle("GET", vm+"/agent/file-read", s.agentFileRead),
		s.handle("POST", vm+"/agent/file-write", s.agentFileWrite),
		s.handle("POST", vm+"/vncproxy", s.vncproxy),
	}
	ws := s.handle("GET", vm+"/vncwebsocket", nil)
	ws.raw = s.vncWebsocket
	return append(routes, ws)
}
