package bench

import (
	"encoding/binary"
	"hash/crc32"
	"math/rand/v2"
)

// Message header layout; see doc.go. All integers are little-endian.
const (
	hdrProducerOff = 0  // uint32: producer id, unique within a run
	hdrSeqOff      = 4  // uint64: the producer's sequence number, from 0
	hdrTimeOff     = 12 // int64: send time (intended send time with -rate), Unix ns
	hdrSumOff      = 20 // uint32: CRC32C(bytes [0,20)) XOR CRC32C(bytes [24,end))
	headerSize     = 24
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// fillPoolSize is the size of the pseudo-random text that fills messages.
const fillPoolSize = 64 << 10

// fillPool is pseudo-random lowercase text from a fixed seed: 16 letters,
// about 4 bits of entropy per byte, so it compresses about 2:1 with an
// entropy coder (zstd) and hardly with S2.
var fillPool = func() []byte {
	r := rand.New(rand.NewPCG(1, 2))
	b := make([]byte, fillPoolSize)
	for i := range b {
		b[i] = 'a' + byte(r.IntN(16))
	}
	return b
}()

// payload stamps message headers. Without compression every message of a
// run carries the same filler, whose CRC is computed once, so a producer
// writes only 24 bytes per message; with compression the filler is a
// different window of fillPool in each message (as distinct records would
// be), or a batch of identical fillers would compress unrealistically well.
type payload struct {
	size    int
	vary    bool
	fillSum uint32 // CRC32C of the fixed filler when !vary
}

func newPayload(size int, vary bool) payload {
	p := payload{size: size, vary: vary}
	if !vary {
		p.fillSum = crc32.Checksum(filler(size, 0), castagnoli)
	}
	return p
}

// poolBytes returns n bytes of fillPool, repeated as needed.
func poolBytes(n int) []byte {
	out := make([]byte, n)
	for off := 0; off < n; off += fillPoolSize {
		copy(out[off:], fillPool)
	}
	return out
}

// filler returns the n-headerSize filler bytes of the message with sequence
// number seq (any seq when fillers do not vary: pass 0).
func filler(size int, seq uint64) []byte {
	n := size - headerSize
	if n <= 0 {
		return nil
	}
	out := make([]byte, 0, n)
	for off := int(seq*61) % fillPoolSize; len(out) < n; off = 0 {
		out = append(out, fillPool[off:min(fillPoolSize, off+n-len(out))]...)
	}
	return out
}

// newMessage returns a message buffer of the payload's size with the
// fixed filler in place.
func (p payload) newMessage() []byte {
	m := make([]byte, p.size)
	copy(m[headerSize:], filler(p.size, 0))
	return m
}

// stamp writes the header (and, when fillers vary, the filler) of m, a
// buffer from newMessage.
func (p payload) stamp(m []byte, producer uint32, seq uint64, sendNs int64) {
	binary.LittleEndian.PutUint32(m[hdrProducerOff:], producer)
	binary.LittleEndian.PutUint64(m[hdrSeqOff:], seq)
	binary.LittleEndian.PutUint64(m[hdrTimeOff:], uint64(sendNs))
	sum := p.fillSum
	if p.vary {
		body := m[headerSize:]
		off := int(seq*61) % fillPoolSize
		for n := 0; n < len(body); off = 0 {
			n += copy(body[n:], fillPool[off:])
		}
		sum = crc32.Checksum(body, castagnoli)
	}
	sum ^= crc32.Checksum(m[:hdrSumOff], castagnoli)
	binary.LittleEndian.PutUint32(m[hdrSumOff:], sum)
}

// header is a parsed message header.
type header struct {
	producer uint32
	seq      uint64
	sendNs   int64
}

// parseHeader reads m's header without checking the message.
func parseHeader(m []byte) (header, bool) {
	if len(m) < headerSize {
		return header{}, false
	}
	return header{
		producer: binary.LittleEndian.Uint32(m[hdrProducerOff:]),
		seq:      binary.LittleEndian.Uint64(m[hdrSeqOff:]),
		sendNs:   int64(binary.LittleEndian.Uint64(m[hdrTimeOff:])),
	}, true
}

// verify reports whether m has the expected size and its checksum matches
// every byte of it.
func verify(m []byte, size int) bool {
	if len(m) != size || size < headerSize {
		return false
	}
	sum := crc32.Checksum(m[:hdrSumOff], castagnoli) ^ crc32.Checksum(m[headerSize:], castagnoli)
	return sum == binary.LittleEndian.Uint32(m[hdrSumOff:])
}
