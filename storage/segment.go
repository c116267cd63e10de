package storage

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/haraqa/haraqa/protocol"
)

// File names inside a topic directory; see doc.go.
const (
	logSuffix  = ".log"
	idxSuffix  = ".idx"
	tmpSuffix  = ".tmp"
	metaName   = "meta"
	nameDigits = 20 // zero-padded decimal base offset: sorts as a string

	// indexEntrySize is one index entry: uint32 offset relative to the
	// segment base, uint32 position of the batch in the segment file.
	indexEntrySize = 8

	// metaSize is the meta file: magic, int64 start offset, CRC32C of the
	// first 12 bytes.
	metaSize  = 16
	metaMagic = "HRQM"

	// topicsDir holds the topic directories in every volume, so no topic
	// name can collide with the lock file.
	topicsDir = "topics"
	lockName  = "LOCK"
	// deletedPrefix starts the name a deleted topic directory is renamed to
	// before it is removed; '~' is not allowed in topic names.
	deletedPrefix = "~deleted."
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func segmentName(base int64, suffix string) string {
	return fmt.Sprintf("%0*d%s", nameDigits, base, suffix)
}

// parseSegmentName returns the base offset of a NNNN.log file name.
func parseSegmentName(name string) (int64, bool) {
	digits, ok := strings.CutSuffix(name, logSuffix)
	if !ok || len(digits) != nameDigits {
		return 0, false
	}
	base, err := strconv.ParseInt(digits, 10, 64)
	if err != nil || base < 0 {
		return 0, false
	}
	return base, true
}

// entry locates one batch: the in-memory index of a segment has one per
// readable batch, in order.
type entry struct {
	off   int64  // base offset of the batch
	pos   uint32 // position in the segment file
	size  uint32 // batch bytes, header included
	count uint32 // messages
}

func (e entry) end() int64 { return e.off + int64(e.count) }

// segment is one log file per volume plus its index. The fields readers use
// (entries, size, next, lastTime) are written only under topic.mu; the
// writer fields (logs) only by the committer holding topic.wmu.
type segment struct {
	base     int64
	entries  []entry // readable batches; append-only while the segment is active
	size     int64   // committed bytes in each volume's log file
	next     int64   // offset after the last message written
	lastTime int64   // append time of the newest batch, Unix ns; 0 if empty
	messages int64   // messages written to this segment

	// logs are the open log files, one per volume, while the segment is
	// active and not parked (closed for the file budget, reopened by the
	// next append); nil once sealed.
	logs   []File
	sealed bool // full: appends go to a later segment

	// filesMu is held (read) by an interval fsync using logs without wmu,
	// and (write) to close them; closings counts the closes under it, so
	// that an fsync holding files closed since (and maybe reopened) skips.
	filesMu  sync.RWMutex
	closings atomic.Uint64
}

// closeLogs closes logs, the segment's log files, once no fsync uses them,
// and returns them to t's file budget.
func (sg *segment) closeLogs(t *topic, logs []File) error {
	if logs == nil {
		return nil
	}
	sg.filesMu.Lock()
	defer sg.filesMu.Unlock()
	sg.closings.Add(1)
	return t.closeFiles(logs)
}

// appendIndex encodes the index file of a segment.
func appendIndex(dst []byte, base int64, entries []entry) []byte {
	for _, e := range entries {
		dst = binary.LittleEndian.AppendUint32(dst, uint32(e.off-base))
		dst = binary.LittleEndian.AppendUint32(dst, e.pos)
	}
	return dst
}

func encodeMeta(start int64) []byte { return encodeStamp(metaMagic, start) }

func decodeMeta(b []byte) (int64, bool) { return decodeStamp(metaMagic, b) }

// encodeStamp encodes a file holding one offset, the meta file's layout
// (metaSize bytes): magic, the offset, CRC32C of the first 12 bytes.
func encodeStamp(magic string, off int64) []byte {
	b := make([]byte, 0, metaSize)
	b = append(b, magic...)
	b = binary.LittleEndian.AppendUint64(b, uint64(off))
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// decodeStamp decodes a file encodeStamp wrote with magic; false if it
// is not one, or its offset is negative.
func decodeStamp(magic string, b []byte) (int64, bool) {
	if len(b) != metaSize || string(b[:4]) != magic {
		return 0, false
	}
	if crc32.Checksum(b[:12], castagnoli) != binary.LittleEndian.Uint32(b[12:]) {
		return 0, false
	}
	off := int64(binary.LittleEndian.Uint64(b[4:]))
	return off, off >= 0
}

// validTopic checks a topic name with protocol.ValidTopic: 1-255 bytes of
// [A-Za-z0-9._-], not "." or "..", so it is always one plain directory name
// inside a volume.
func validTopic(name string) error {
	if protocol.ValidTopic(name) != nil {
		return fmt.Errorf("%w: %q", ErrInvalidTopic, name)
	}
	return nil
}
