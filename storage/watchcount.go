package storage

// Watches returns the number of watches armed on the log (Watch) that
// have neither run nor been cancelled: what an append to it will call.
func (l *Log) Watches() (int, error) {
	t, err := l.live()
	if err != nil {
		return 0, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.waiters), nil
}
