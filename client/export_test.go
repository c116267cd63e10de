package client

// MainConnBroken reports whether c's shared connection is gone or failed,
// so that its next request dials again: for tests that break the network
// and must not race the client noticing it.
func MainConnBroken(c *Client) bool {
	s := &c.main
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.conn == nil || s.conn.dead()
}
