package storage

import (
	"encoding/binary"
	"hash/crc32"
	"slices"
	"strings"
)

// The groups file of a topic (see doc.go for the drawing): a log of
// commit and delete records, each with its own CRC, appended by every
// commit and compacted (rewritten whole, one commit record per group) when
// it grows past twice its live size plus groupsCompactSlack. The format
// before it, the whole table rewritten on every commit, still loads; the
// first write after it rewrites the file as a log.
const (
	groupsName = "groups"
	// groupsLogMagic and the version start a log file.
	groupsLogMagic      = "HRQL"
	groupsLogVersion    = 1
	groupsLogHeaderSize = 8 // magic, version uint32
	// A record: uint32 payload length, the payload, uint32 CRC32C of the
	// length and the payload.
	groupsRecOverhead = 8
	groupsRecCommit   = 1 // payload: kind, name, offset int64, owner
	groupsRecDelete   = 2 // payload: kind, name
	// groupsMaxPayload is the largest payload: a commit with a 255-byte
	// name and a 255-byte owner.
	groupsMaxPayload = 1 + 1 + 255 + 8 + 1 + 255
	// groupsCompactSlack is added to twice the live size before a log is
	// compacted, so that a small table is not rewritten every few commits.
	groupsCompactSlack = 64 << 10
	// maxGroupsLogSize is the largest log the writer leaves: twice the
	// largest live size plus the slack (compaction happens before it).
	maxGroupsLogSize = 2*(groupsLogHeaderSize+MaxGroupsPerTopic*(groupsRecOverhead+groupsMaxPayload)) + groupsCompactSlack

	// The format before the log: the whole table, one CRC.
	groupsMagic      = "HRQG"
	groupsHeaderSize = 8  // magic, count uint32
	groupsCRCSize    = 4  // CRC32C of everything before it
	groupsEntryMin   = 11 // uint16 name length, a 1-byte name, int64 offset
	groupsEntryMax   = 2 + 255 + 8
	// maxGroupsFileSize is the largest valid file of that format.
	maxGroupsFileSize = groupsHeaderSize + MaxGroupsPerTopic*groupsEntryMax + groupsCRCSize
	// maxGroupsReadSize is the largest groups file recovery reads.
	maxGroupsReadSize = max(maxGroupsLogSize, maxGroupsFileSize)
)

// groupRecord is a group's state as the file keeps it.
type groupRecord struct {
	committed int64
	owner     string // the token (its hash) that created the group; "" without auth
}

// appendGroupRecord appends to b the record committing off for group,
// owned by owner, or (del) the record deleting it.
func appendGroupRecord(b []byte, group string, del bool, off int64, owner string) []byte {
	n := 1 + 1 + len(group)
	if !del {
		n += 8 + 1 + len(owner)
	}
	start := len(b)
	b = binary.LittleEndian.AppendUint32(b, uint32(n))
	if del {
		b = append(b, groupsRecDelete)
	} else {
		b = append(b, groupsRecCommit)
	}
	b = append(b, byte(len(group)))
	b = append(b, group...)
	if !del {
		b = binary.LittleEndian.AppendUint64(b, uint64(off))
		b = append(b, byte(len(owner)))
		b = append(b, owner...)
	}
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b[start:], castagnoli))
}

// groupRecordSize is the size of a commit record of group owned by owner.
func groupRecordSize(group, owner string) int64 {
	return int64(groupsRecOverhead + 1 + 1 + len(group) + 8 + 1 + len(owner))
}

// encodeGroupsLog returns a compacted log holding the committed groups of
// m, by name, so that equal tables give equal bytes on every volume.
func encodeGroupsLog(m map[string]*groupEntry) []byte {
	names := make([]string, 0, len(m))
	size := int64(groupsLogHeaderSize)
	for n, e := range m {
		if e.committed != NoOffset {
			names = append(names, n)
			size += groupRecordSize(n, e.owner)
		}
	}
	slices.Sort(names)
	b := make([]byte, 0, size)
	b = append(b, groupsLogMagic...)
	b = binary.LittleEndian.AppendUint32(b, groupsLogVersion)
	for _, n := range names {
		b = appendGroupRecord(b, n, false, m[n].committed, m[n].owner)
	}
	return b
}

// decodeGroupsFile parses a groups file of either format. ok is false
// when b is no groups file at all (its header is bad). For a log, the
// records are applied up to the first bad one (cut short, a CRC that does
// not match, an invalid name or offset, past MaxGroupsPerTopic groups);
// clean is false if there was one, and good is the length of the valid
// prefix. A file of the old format is clean only if it is wholly valid
// (legacy true). It never panics.
func decodeGroupsFile(b []byte) (m map[string]groupRecord, good int, clean, legacy, ok bool) {
	if len(b) >= 4 && string(b[:4]) == groupsMagic {
		old, ok := decodeGroups(b)
		if !ok {
			return nil, 0, false, true, false
		}
		m = make(map[string]groupRecord, len(old))
		for n, off := range old {
			m[n] = groupRecord{committed: off}
		}
		return m, len(b), true, true, true
	}
	if len(b) < groupsLogHeaderSize || string(b[:4]) != groupsLogMagic || binary.LittleEndian.Uint32(b[4:]) != groupsLogVersion {
		return nil, 0, false, false, false
	}
	m = make(map[string]groupRecord)
	good = groupsLogHeaderSize
	for good < len(b) {
		n, ok := applyGroupRecord(m, b[good:])
		if !ok {
			return m, good, false, false, true
		}
		good += n
	}
	return m, good, true, false, true
}

// applyGroupRecord applies the record at the start of b to m and returns
// its length; ok is false if b does not start with a valid record.
func applyGroupRecord(m map[string]groupRecord, b []byte) (int, bool) {
	if len(b) < groupsRecOverhead {
		return 0, false
	}
	n := int(binary.LittleEndian.Uint32(b))
	if n < 3 || n > groupsMaxPayload || len(b) < groupsRecOverhead+n {
		return 0, false
	}
	if crc32.Checksum(b[:4+n], castagnoli) != binary.LittleEndian.Uint32(b[4+n:]) {
		return 0, false
	}
	p := b[4 : 4+n]
	kind, nl := p[0], int(p[1])
	if len(p) < 2+nl {
		return 0, false
	}
	name, rest := string(p[2:2+nl]), p[2+nl:]
	if validGroup(name) != nil {
		return 0, false
	}
	switch kind {
	case groupsRecDelete:
		if len(rest) != 0 {
			return 0, false
		}
		delete(m, name)
	case groupsRecCommit:
		if len(rest) < 9 || len(rest) != 9+int(rest[8]) {
			return 0, false
		}
		off := int64(binary.LittleEndian.Uint64(rest))
		if _, had := m[name]; off < 0 || !had && len(m) >= MaxGroupsPerTopic {
			return 0, false
		}
		m[name] = groupRecord{committed: off, owner: string(rest[9:])}
	default:
		return 0, false
	}
	return groupsRecOverhead + n, true
}

// decodeGroups parses a groups file of the old format: ok is false unless
// b is exactly one valid file (magic, count within MaxGroupsPerTopic,
// valid names in ascending order without repeats, offsets not negative,
// CRC). It never panics and allocates only the names it returns.
func decodeGroups(b []byte) (map[string]int64, bool) {
	if len(b) < groupsHeaderSize+groupsCRCSize || len(b) > maxGroupsFileSize || string(b[:4]) != groupsMagic {
		return nil, false
	}
	body, sum := b[:len(b)-groupsCRCSize], b[len(b)-groupsCRCSize:]
	if crc32.Checksum(body, castagnoli) != binary.LittleEndian.Uint32(sum) {
		return nil, false
	}
	count := binary.LittleEndian.Uint32(b[4:])
	rest := body[groupsHeaderSize:]
	if count > MaxGroupsPerTopic || uint64(count) > uint64(len(rest)/groupsEntryMin) {
		return nil, false
	}
	out := make(map[string]int64, count)
	prev := ""
	for i := uint32(0); i < count; i++ {
		if len(rest) < 2 {
			return nil, false
		}
		n := int(binary.LittleEndian.Uint16(rest))
		if len(rest) < 2+n+8 {
			return nil, false
		}
		name := string(rest[2 : 2+n])
		off := int64(binary.LittleEndian.Uint64(rest[2+n:]))
		if validGroup(name) != nil || off < 0 || i > 0 && strings.Compare(name, prev) <= 0 {
			return nil, false
		}
		out[name], prev = off, name
		rest = rest[2+n+8:]
	}
	if len(rest) != 0 {
		return nil, false
	}
	return out, true
}
