package bench

import "errors"

// Errors, usable with errors.Is.
var (
	// ErrUsage: the configuration is invalid (a bad flag value or a bad
	// combination of flags). The command exits with status 2.
	ErrUsage = errors.New("bench: invalid usage")
	// ErrInterrupted: the run was cancelled before it finished.
	ErrInterrupted = errors.New("bench: interrupted")
	// ErrServer: the embedded server could not be started or stopped.
	ErrServer = errors.New("bench: embedded server")
	// ErrCeiling: a ceiling baseline failed.
	ErrCeiling = errors.New("bench: ceiling")
	// ErrMatrix: a run of the matrix failed or its output could not be written.
	ErrMatrix = errors.New("bench: matrix")
)
