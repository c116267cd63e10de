package storage

// Watches returns the number of watches armed on topic name (Watch) that
// have neither run nor been cancelled: what an append to it will call.
func (s *Store) Watches(name string) (int, error) {
	t, err := s.lookup(name)
	if err != nil {
		return 0, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.waiters), nil
}
