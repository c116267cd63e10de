package protocol

import (
	"encoding/binary"
	"fmt"
)

// Message headers. In a batch with FlagHeaders, every message (the bytes
// after its uvarint length) starts with a header section:
//
//	uvarint  count            0 to MaxHeaders
//	count times:
//	  uvarint  key length     1 to MaxHeaderKeyLen
//	  bytes    key
//	  uvarint  value length   0 to MaxHeaderValueLen
//	  bytes    value
//	bytes    the message value, to the end of the message
//
// Every uvarint here takes the fewest bytes that hold its value.
// A message without headers has the one-byte section 0. The lengths that
// frame the messages are unchanged, so a reader that skips messages never
// looks inside them.
const (
	// MaxHeaders bounds the headers of one message.
	MaxHeaders = 64
	// MaxHeaderKeyLen bounds a header key, in bytes; keys are not empty.
	MaxHeaderKeyLen = 255
	// MaxHeaderValueLen bounds a header value, in bytes.
	MaxHeaderValueLen = 64 << 10
)

// Header is one message header. Key and Value borrow from the message they
// were split from (SplitHeaders).
type Header struct {
	Key   []byte
	Value []byte
}

// CheckHeaders reports whether hdrs fit the limits above (count, key and
// value lengths), wrapping ErrInvalidArgument.
func CheckHeaders(hdrs []Header) error {
	if len(hdrs) > MaxHeaders {
		return fmt.Errorf("%w: %d headers, at most %d (MaxHeaders)", ErrInvalidArgument, len(hdrs), MaxHeaders)
	}
	for _, h := range hdrs {
		if len(h.Key) == 0 || len(h.Key) > MaxHeaderKeyLen {
			return fmt.Errorf("%w: a header key is %d bytes, must be 1 to %d", ErrInvalidArgument, len(h.Key), MaxHeaderKeyLen)
		}
		if len(h.Value) > MaxHeaderValueLen {
			return fmt.Errorf("%w: header %q: its value is %d bytes, at most %d", ErrInvalidArgument, h.Key, len(h.Value), MaxHeaderValueLen)
		}
	}
	return nil
}

// HeadersSize returns the size of the header section holding hdrs.
func HeadersSize(hdrs []Header) int {
	n := uvarintLen(uint64(len(hdrs)))
	for _, h := range hdrs {
		n += uvarintLen(uint64(len(h.Key))) + len(h.Key) + uvarintLen(uint64(len(h.Value))) + len(h.Value)
	}
	return n
}

// AppendHeaders appends the header section of hdrs and then value to dst:
// one message's payload in a batch with FlagHeaders (AppendMessage adds its
// length). hdrs must pass CheckHeaders.
func AppendHeaders(dst []byte, hdrs []Header, value []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(hdrs)))
	for _, h := range hdrs {
		dst = binary.AppendUvarint(dst, uint64(len(h.Key)))
		dst = append(dst, h.Key...)
		dst = binary.AppendUvarint(dst, uint64(len(h.Value)))
		dst = append(dst, h.Value...)
	}
	return append(dst, value...)
}

// AppendHeaderMessage appends one length-prefixed message with headers to
// an uncompressed body of a batch with FlagHeaders.
func AppendHeaderMessage(dst []byte, hdrs []Header, value []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(HeadersSize(hdrs)+len(value)))
	return AppendHeaders(dst, hdrs, value)
}

// SplitHeaders splits msg, a message of a batch with FlagHeaders, into
// its headers, appended to dst, and its value. Keys, values and the value
// borrow from msg. A malformed section returns ErrBadMessage.
func SplitHeaders(dst []Header, msg []byte) ([]Header, []byte, error) {
	n, p, ok := uvarintAt(msg, 0)
	if !ok || n > MaxHeaders {
		return dst, nil, ErrBadMessage
	}
	for range n {
		var k, v []byte
		if k, p, ok = field(msg, p, MaxHeaderKeyLen); !ok || len(k) == 0 {
			return dst, nil, ErrBadMessage
		}
		if v, p, ok = field(msg, p, MaxHeaderValueLen); !ok {
			return dst, nil, ErrBadMessage
		}
		dst = append(dst, Header{Key: k, Value: v})
	}
	return dst, msg[p:len(msg):len(msg)], nil
}

// HeaderValue returns the value of msg, a message of a batch with
// FlagHeaders, skipping its header section without allocating. It borrows
// from msg. A malformed section returns ErrBadMessage.
func HeaderValue(msg []byte) ([]byte, error) {
	p, ok := skipHeaders(msg)
	if !ok {
		return nil, ErrBadMessage
	}
	return msg[p:len(msg):len(msg)], nil
}

// skipHeaders returns where the value of msg starts, checking its header
// section as SplitHeaders does without keeping anything.
func skipHeaders(msg []byte) (int, bool) {
	n, p, ok := uvarintAt(msg, 0)
	if !ok || n > MaxHeaders {
		return 0, false
	}
	for range n {
		var k []byte
		if k, p, ok = field(msg, p, MaxHeaderKeyLen); !ok || len(k) == 0 {
			return 0, false
		}
		if _, p, ok = field(msg, p, MaxHeaderValueLen); !ok {
			return 0, false
		}
	}
	return p, true
}

// uvarintAt reads the uvarint at b[p:], refusing one longer than needed
// (0x80 0x00 for 0), so that a header section has one encoding.
func uvarintAt(b []byte, p int) (uint64, int, bool) {
	if p >= len(b) {
		return 0, p, false
	}
	v, n := binary.Uvarint(b[p:])
	if n <= 0 || n != uvarintLen(v) {
		return 0, p, false
	}
	return v, p + n, true
}

// field reads a uvarint length of at most max and that many bytes at b[p:].
func field(b []byte, p, max int) ([]byte, int, bool) {
	l, p, ok := uvarintAt(b, p)
	if !ok || l > uint64(max) || l > uint64(len(b)-p) {
		return nil, p, false
	}
	end := p + int(l)
	return b[p:end:end], end, true
}

// ValidateHeaderMessages is ValidateMessages for the body of a batch with
// FlagHeaders: every message must also hold a well-formed header section.
func ValidateHeaderMessages(body []byte, count int) error {
	for range count {
		msg, rest, err := NextMessage(body)
		if err != nil {
			return err
		}
		if _, ok := skipHeaders(msg); !ok {
			return ErrBadMessage
		}
		body = rest
	}
	if len(body) != 0 {
		return ErrBadCount
	}
	return nil
}
