package pvetest

import "strings"

// Fault makes matching requests fail before they reach the model.
type Fault struct {
	Method string // "" matches every method
	Path   string // a substring of the path below /api2/json
	Status int    // e.g. 500, or 596 (pveproxy could not reach the node)
	// Message is PVE's reason text, e.g. "Connection timed out".
	Message string
	// Times is how many requests fail; 0 means until RemoveFaults.
	Times int
}

// InjectFault adds a fault; faults are tried in the order added.
func (s *Server) InjectFault(f Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if f.Status == 0 {
		f.Status = 500
	}
	s.faults = append(s.faults, &f)
}

// RemoveFaults drops every injected fault.
func (s *Server) RemoveFaults() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = nil
}

func (s *Server) injectedFault(method, path string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, f := range s.faults {
		if (f.Method != "" && f.Method != method) || !strings.Contains(path, f.Path) {
			continue
		}
		if f.Times > 0 {
			if f.Times--; f.Times == 0 {
				s.faults = append(s.faults[:i:i], s.faults[i+1:]...)
			}
		}
		return &apiError{status: f.Status, msg: f.Message}
	}
	return nil
}

// AgentBusy makes the next n guest agent calls fail with PVE's
// "VM N qmp command 'guest-...' failed - got timeout" (an agent busy with
// IO), whichever VM they are for.
func (s *Server) AgentBusy(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.agentBusy = n
}

// ExpireNextTickets makes the next n vncproxy tickets already older than
// the ticket lifetime, so their vncwebsocket is refused.
func (s *Server) ExpireNextTickets(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expireNext = n
}
