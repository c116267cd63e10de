package broker

import "errors"

var (
	// ErrInvalidConfig: Config.Validate failed.
	ErrInvalidConfig = errors.New("broker: invalid config")
	// ErrNotStarted: Addr or Shutdown before Start succeeded.
	ErrNotStarted = errors.New("broker: not started")
	// ErrEngineStopped: the event loops stopped while the broker was not
	// shutting down (Broker.Dead).
	ErrEngineStopped = errors.New("broker: event loops stopped")

	errStalled = errors.New("broker: connection closed")
)
