package storage

import (
	"encoding/binary"
	"hash/crc32"
	"slices"
	"strings"
)

// The groups file of a topic (see doc.go for the drawing): the committed
// offsets of its groups, rewritten whole on every commit.
const (
	groupsName       = "groups"
	groupsMagic      = "HRQG"
	groupsHeaderSize = 8  // magic, count uint32
	groupsCRCSize    = 4  // CRC32C of everything before it
	groupsEntryMin   = 11 // uint16 name length, a 1-byte name, int64 offset
	groupsEntryMax   = 2 + 255 + 8
	// maxGroupsFileSize is the largest valid groups file.
	maxGroupsFileSize = groupsHeaderSize + MaxGroupsPerTopic*groupsEntryMax + groupsCRCSize
)

// encodeGroups returns the groups file holding the committed groups of m,
// by name, so that equal tables give equal bytes on every volume.
func encodeGroups(m map[string]*groupEntry) []byte {
	names := make([]string, 0, len(m))
	for n, e := range m {
		if e.committed != NoOffset {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	b := make([]byte, 0, groupsHeaderSize+len(names)*groupsEntryMax/4+groupsCRCSize)
	b = append(b, groupsMagic...)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(names)))
	for _, n := range names {
		b = binary.LittleEndian.AppendUint16(b, uint16(len(n)))
		b = append(b, n...)
		b = binary.LittleEndian.AppendUint64(b, uint64(m[n].committed))
	}
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// decodeGroups parses a groups file: ok is false unless b is exactly one
// valid file (magic, count within MaxGroupsPerTopic, valid names in
// ascending order without repeats, offsets not negative, CRC). It never
// panics and allocates only the names it returns.
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
