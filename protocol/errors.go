package protocol

import "errors"

// Batch decoding errors. A decoder returns exactly one of these (unwrapped),
// so callers can tell a torn tail (ErrShortBatch) from corruption.
var (
	// ErrShortBatch: the input ends before the batch its header declares.
	ErrShortBatch = errors.New("protocol: batch is cut short")
	// ErrBadLength: the length field is smaller than a batch header.
	ErrBadLength = errors.New("protocol: batch length is invalid")
	// ErrBatchTooLarge: the length field is over the limit.
	ErrBatchTooLarge = errors.New("protocol: batch is too large")
	// ErrBadMagic: the format version is unknown.
	ErrBadMagic = errors.New("protocol: unknown batch format version")
	// ErrBadCodec: the codec field is unknown.
	ErrBadCodec = errors.New("protocol: unknown batch codec")
	// ErrBadFlags: reserved flag bits are set.
	ErrBadFlags = errors.New("protocol: reserved batch flags are set")
	// ErrBadCount: the message count does not match the body.
	ErrBadCount = errors.New("protocol: batch message count does not match its body")
	// ErrBadMessage: a message length prefix runs past the body.
	ErrBadMessage = errors.New("protocol: malformed message in batch body")
	// ErrCRCMismatch: the CRC32C does not match the batch contents.
	ErrCRCMismatch = errors.New("protocol: batch CRC mismatch")
	// ErrBadBody: a compressed body does not decode to its declared size.
	// Batch.DecodeBody wraps it with detail.
	ErrBadBody = errors.New("protocol: compressed batch body does not decode")
)

// Frame and message errors. Decoders return these or errors that wrap them
// with detail (check with errors.Is); CodeOf maps each to its wire Code.
var (
	// ErrShortFrame: the input ends before the frame does; read more bytes.
	ErrShortFrame = errors.New("protocol: frame is incomplete")
	// ErrFrameTooLarge: a frame's length field is over the maximum frame size.
	ErrFrameTooLarge = errors.New("protocol: frame is too large")
	// ErrMalformed: a frame or payload does not follow the format: a length
	// that does not fit, bytes left over, reserved bits set, an unknown enum.
	ErrMalformed = errors.New("protocol: malformed frame")
	// ErrUnsupportedVersion: the frame is in a protocol version this package
	// does not speak.
	ErrUnsupportedVersion = errors.New("protocol: unsupported protocol version")
	// ErrUnknownOp: the request's op is not known in its protocol version.
	ErrUnknownOp = errors.New("protocol: unknown op")
	// ErrInvalidTopic: a topic name is empty, longer than MaxTopicLen, "." or
	// "..", or holds a byte outside [A-Za-z0-9._-].
	ErrInvalidTopic = errors.New("protocol: invalid topic name")
	// ErrInvalidArgument: a field is well-formed but out of its range (for
	// example a regex longer than MaxRegexLen).
	ErrInvalidArgument = errors.New("protocol: invalid argument")
)

// Detailed forms of the errors above, made once so that returning them does
// not allocate.
var (
	errShortLength     = wrap(ErrMalformed, "length field smaller than a header")
	errTrailingFrame   = wrap(ErrMalformed, "bytes after the end of the frame")
	errReservedHeader  = wrap(ErrMalformed, "reserved header bits are set")
	errShortPayload    = wrap(ErrMalformed, "payload is cut short")
	errTrailingPayload = wrap(ErrMalformed, "bytes after the last field")
	errLongMessage     = wrap(ErrMalformed, "error message is too long")
	errProduceFlags    = wrap(ErrMalformed, "unknown produce flags")
	errExpectOffset    = wrap(ErrInvalidArgument, "produce: the expected offset is negative")
	errTruncateBy      = wrap(ErrMalformed, "unknown truncate mode")
	errBatchesSize     = wrap(ErrMalformed, "batches size does not match the frame")
	errTrailingBatch   = wrap(ErrMalformed, "bytes after the batch")
	errNameCount       = wrap(ErrMalformed, "topic count does not fit the payload")

	errTopicLength = wrap(ErrInvalidTopic, "must be 1 to 255 bytes")
	errTopicDots   = wrap(ErrInvalidTopic, `must not be "." or "..", which name directories`)
	errTopicByte   = wrap(ErrInvalidTopic, "only A-Z, a-z, 0-9, '.', '_', '-', ':' and '@' are allowed")
	errLongRegex   = wrap(ErrInvalidArgument, "regex is longer than 4096 bytes")
	errLongName    = wrap(ErrInvalidArgument, "hello: client name is longer than 255 bytes")
	errLongToken   = wrap(ErrInvalidArgument, "hello: token is longer than 1024 bytes")

	errImportFlags  = wrap(ErrMalformed, "unknown import flags")
	errImportOffset = wrap(ErrInvalidArgument, "import: the offset is negative")
	errImportFirst  = wrap(ErrInvalidArgument, "import: the first batch does not hold the offset")
	errImportGap    = wrap(ErrInvalidArgument, "import: a batch does not start where the one before ends")
	errImportTime   = wrap(ErrInvalidArgument, "import: a batch was appended before the one it follows")

	errCommitFlags  = wrap(ErrMalformed, "unknown commit flags")
	errLeaseAction  = wrap(ErrMalformed, "unknown lease action")
	errGroupCount   = wrap(ErrMalformed, "group count does not fit the payload")
	errGroupName    = wrap(ErrInvalidArgument, "group name must be 1 to 255 bytes of A-Z, a-z, 0-9, '.', '_' and '-', not \".\" or \"..\"")
	errLongMember   = wrap(ErrInvalidArgument, "member id is longer than 255 bytes")
	errNoMember     = wrap(ErrInvalidArgument, "group lease: the member id is empty")
	errLeaseTTL     = wrap(ErrInvalidArgument, "group lease: longer than 300000 ms (MaxLeaseMs)")
	errCommitOffset = wrap(ErrInvalidArgument, "commit: the offset is negative")
	errCommitExpect = wrap(ErrInvalidArgument, "commit: the expected offset is below -1 (none)")
)

// detailError adds detail to a sentinel without hiding it from errors.Is.
type detailError struct {
	err    error
	detail string
}

func wrap(err error, detail string) error { return &detailError{err, detail} }

func (e *detailError) Error() string { return e.err.Error() + ": " + e.detail }
func (e *detailError) Unwrap() error { return e.err }
