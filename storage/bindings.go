package storage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
)

// The producers file keeps which owner (token hash) each idempotent
// producer of a topic is bound to, one file per volume, the same on every
// volume. The batches name their producer but not its owner, so recovery
// rebuilds the producer table from the log and joins it to this file.
//
// It is a sequence of records, each: the producer id (8 bytes, little
// endian), the owner's length (1 byte), the owner, and a CRC-32C of the
// record before it (4 bytes). A record is appended on every volume, and
// fsynced with FsyncAlways, before the first batch of the producer it
// binds is written, so no batch is stored under an owner the file lacks
// (kill -9 keeps both; without FsyncAlways a power loss may lose the tail
// of either). Recovery reads the records up to the first torn one from
// every volume, takes the volume holding the most, keeps the bindings of
// the producers the table remembers (or holds tombstones for) and writes
// that back, compacted, to every volume. At run time the file is
// rewritten compacted when it holds more than twice the records it needs
// plus bindingsSlack.

const (
	bindingsName  = "producers"
	bindingsSlack = 64
	// maxBindingRecord is the largest record: an owner of 255 bytes.
	maxBindingRecord = 13 + 255
)

// maxBindingsFileSize bounds what recovery reads of the file of a topic
// of at most max producers: the table and as many tombstones, twice over
// (the file is compacted past that), plus the slack.
func maxBindingsFileSize(max int) int64 {
	return int64(4*max+2*bindingsSlack) * maxBindingRecord
}

// bindingsFile is the state of a topic's producers file: the records and
// bytes it holds (the same on every volume). wmu must be held.
type bindingsFile struct {
	records int
	size    int64
}

// appendBinding appends the record binding producer id to owner.
func appendBinding(b []byte, id uint64, owner string) []byte {
	owner = owner[:min(len(owner), 255)]
	start := len(b)
	b = binary.LittleEndian.AppendUint64(b, id)
	b = append(b, byte(len(owner)))
	b = append(b, owner...)
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b[start:], castagnoli))
}

// decodeBindings reads b's records up to the first torn or damaged one
// (later records win) and returns them with how many it read.
func decodeBindings(b []byte) (map[uint64]string, int) {
	m := make(map[uint64]string)
	n := 0
	for len(b) >= 13 {
		l := int(b[8])
		if len(b) < 13+l {
			break
		}
		rec := b[:9+l]
		if crc32.Checksum(rec, castagnoli) != binary.LittleEndian.Uint32(b[9+l:]) {
			break
		}
		m[binary.LittleEndian.Uint64(rec)] = string(rec[9:])
		n++
		b = b[13+l:]
	}
	return m, n
}

// writeBindings makes the producers file hold the bindings that recs
// made (undoRec.binds), before their batches are written, compacting it
// when it grew past what it needs. wmu must be held.
func (t *topic) writeBindings(recs []undoRec) error {
	var b []byte
	n := 0
	for i := range recs {
		if recs[i].binds() {
			b = appendBinding(b, recs[i].id, recs[i].owner)
			n++
		}
	}
	if n == 0 {
		return nil
	}
	pt := &t.producers
	if pt.file.records+n > 2*(len(pt.m)+len(pt.gone))+bindingsSlack {
		return t.rewriteBindings(t.s.opts.Fsync == FsyncAlways)
	}
	durable := t.s.opts.Fsync == FsyncAlways
	for v := range t.s.opts.Volumes {
		if err := t.appendBindings(filepath.Join(t.s.topicDir(v, t.name), bindingsName), b, pt.file.size, durable); err != nil {
			return fmt.Errorf("storage: topic %q: producers file on volume %s: %w", t.name, t.s.opts.Volumes[v], err)
		}
	}
	pt.file.records += n
	pt.file.size += int64(len(b))
	return nil
}

// appendBindings writes b at off of the file at path, created if need be,
// fsynced (and its directory, when created) when durable.
func (t *topic) appendBindings(path string, b []byte, off int64, durable bool) error {
	f, err := t.s.fs.OpenFile(path, os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	_, err = f.WriteAt(b, off)
	if err == nil && durable {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil && durable && off == 0 {
		err = t.s.fs.SyncDir(filepath.Dir(path))
	}
	return err
}

// rewriteBindings writes the bindings of every producer the table holds
// or holds a tombstone for, bound to an owner, as the producers file of
// every volume (through a temporary file and a rename; fsynced when
// durable), or removes the file when there are none. wmu must be held,
// or recovery own the topic.
func (t *topic) rewriteBindings(durable bool) error {
	pt := &t.producers
	var b []byte
	n := 0
	for id, ps := range pt.m {
		if ps.owner != "" {
			b = appendBinding(b, id, ps.owner)
			n++
		}
	}
	for id, owner := range pt.gone {
		if owner != "" {
			b = appendBinding(b, id, owner)
			n++
		}
	}
	for v := range t.s.opts.Volumes {
		path := filepath.Join(t.s.topicDir(v, t.name), bindingsName)
		var err error
		switch {
		case n == 0:
			if err = t.s.fs.Remove(path); errors.Is(err, os.ErrNotExist) {
				err = nil
			}
		case durable:
			err = t.s.writeFileDurable(path, b)
		default:
			if err = t.appendBindings(path+tmpSuffix, b, 0, false); err == nil {
				err = t.s.fs.Rename(path+tmpSuffix, path)
			}
		}
		if err != nil {
			return fmt.Errorf("storage: topic %q: producers file on volume %s: %w", t.name, t.s.opts.Volumes[v], err)
		}
	}
	pt.file = bindingsFile{records: n, size: int64(len(b))}
	return nil
}

// bindings joins the producers file to the table recovery rebuilt from
// the log: the volume holding the most records is the reference, and
// what it binds is written back, compacted, to every volume. A producer
// the file does not bind stays bound to none: the first owner whose batch
// uses it is bound to it (producers stored without a token).
func (r *recovery) bindings(t *topic, dirs []string) error {
	var ref map[uint64]string
	found, best := false, -1
	for _, dir := range dirs {
		b, err := r.readSmall(filepath.Join(dir, bindingsName), maxBindingsFileSize(r.s.opts.MaxProducers))
		if err != nil {
			return err
		}
		if b == nil {
			continue
		}
		found = true
		if m, n := decodeBindings(b); n > best {
			ref, best = m, n
		}
	}
	if !found {
		return nil
	}
	pt := &t.producers
	for id, owner := range ref {
		if ps := pt.m[id]; ps != nil {
			pt.rebind(ps, owner)
		} else if _, ok := pt.gone[id]; ok {
			pt.gone[id] = owner
		}
	}
	return t.rewriteBindings(true)
}
