package storage

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"path/filepath"
	"sort"
)

// Leader epochs (KIP-101, KIP-279): each topic of a replicated store
// keeps, in its epochs file, the offset at which each leader epoch began,
// so that a follower can ask its leader where the epoch of its own last
// batch ended (EpochEnd) and cut what it holds past that (TruncateAfter)
// rather than trust a high-water mark. See doc.go, "Epochs file".

// epochsName is the epochs file in a topic directory.
const epochsName = "epochs"

// Epochs file layout; see doc.go for the drawing.
const (
	epochsMagic      = "HRQE"
	epochsVersion    = 1
	epochsHeaderSize = 12 // magic, version, entry count
	epochEntrySize   = 16 // int64 epoch, int64 start offset
	epochsCRCSize    = 4
	// maxEpochs bounds the entries a file holds (1 MiB): a topic that
	// changed leaders more often than that forgets its oldest epochs.
	maxEpochs = 1 << 16
	// maxEpochsFileSize is the largest valid file.
	maxEpochsFileSize = epochsHeaderSize + maxEpochs*epochEntrySize + epochsCRCSize
)

// Decoding errors: a short file is torn, a long or damaged one corrupt.
var (
	errEpochsTorn    = errors.New("storage: epochs file: torn")
	errEpochsCorrupt = errors.New("storage: epochs file: corrupt")
)

// EpochStart is one entry of a topic's epochs file: leader epoch Epoch
// began at offset Start.
type EpochStart struct{ Epoch, Start int64 }

// appendEpochs encodes an epochs file holding es.
func appendEpochs(dst []byte, es []EpochStart) []byte {
	start := len(dst)
	dst = append(dst, epochsMagic...)
	dst = binary.LittleEndian.AppendUint32(dst, epochsVersion)
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(es)))
	for _, e := range es {
		dst = binary.LittleEndian.AppendUint64(dst, uint64(e.Epoch))
		dst = binary.LittleEndian.AppendUint64(dst, uint64(e.Start))
	}
	return binary.LittleEndian.AppendUint32(dst, crc32.Checksum(dst[start:], castagnoli))
}

// parseEpochs decodes an epochs file. The entries are new memory. A file
// cut short is errEpochsTorn; a bad magic, version, count, CRC, or
// entries not strictly ascending in both fields (or negative) are
// errEpochsCorrupt.
func parseEpochs(b []byte) ([]EpochStart, error) {
	if len(b) < epochsHeaderSize+epochsCRCSize {
		if !bytes.HasPrefix([]byte(epochsMagic), b[:min(len(b), len(epochsMagic))]) {
			return nil, fmt.Errorf("%w: bad magic", errEpochsCorrupt)
		}
		return nil, fmt.Errorf("%w: %d bytes", errEpochsTorn, len(b))
	}
	if string(b[:4]) != epochsMagic {
		return nil, fmt.Errorf("%w: bad magic", errEpochsCorrupt)
	}
	if v := binary.LittleEndian.Uint32(b[4:]); v != epochsVersion {
		return nil, fmt.Errorf("%w: version %d", errEpochsCorrupt, v)
	}
	n := binary.LittleEndian.Uint32(b[8:])
	if n > maxEpochs {
		return nil, fmt.Errorf("%w: %d entries, at most %d", errEpochsCorrupt, n, maxEpochs)
	}
	size := epochsHeaderSize + int(n)*epochEntrySize + epochsCRCSize
	switch {
	case len(b) < size:
		return nil, fmt.Errorf("%w: %d bytes, want %d", errEpochsTorn, len(b), size)
	case len(b) > size:
		return nil, fmt.Errorf("%w: %d bytes after the file", errEpochsCorrupt, len(b)-size)
	}
	body := b[:size-epochsCRCSize]
	if crc32.Checksum(body, castagnoli) != binary.LittleEndian.Uint32(b[size-epochsCRCSize:]) {
		return nil, fmt.Errorf("%w: CRC mismatch", errEpochsCorrupt)
	}
	es := make([]EpochStart, n)
	for i := range es {
		p := body[epochsHeaderSize+i*epochEntrySize:]
		es[i] = EpochStart{Epoch: int64(binary.LittleEndian.Uint64(p)), Start: int64(binary.LittleEndian.Uint64(p[8:]))}
		if es[i].Epoch < 0 || es[i].Start < 0 || i > 0 && (es[i].Epoch <= es[i-1].Epoch || es[i].Start <= es[i-1].Start) {
			return nil, fmt.Errorf("%w: entry %d (%d at %d) out of order", errEpochsCorrupt, i, es[i].Epoch, es[i].Start)
		}
	}
	return es, nil
}

// SetEpoch records that leader epoch epoch begins at offset start of
// the log: its next offset when a leader takes over, or the
// base of the first batch a follower copies under that epoch. The file
// is written durably on every volume before SetEpoch returns.
//
// An epoch equal to the last recorded one is a no-op when start is at
// or above its start (the epoch began there already). A lower epoch, a
// start below the last entry's start, a negative epoch or a start outside
// [0, MaxOffset] fails with ErrInvalidEpoch. A new epoch starting where
// the last one started replaces it (that epoch holds no offsets), so
// starts stay strictly ascending. start may be past the topic's next
// offset: a follower records the epoch of the first batch it copies
// before copying it, and into a topic without segments that batch may
// start anywhere.
func (l *Log) SetEpoch(epoch, start int64) error {
	t, err := l.live()
	if err != nil {
		return err
	}
	return t.setEpoch(epoch, start)
}

func (t *topic) setEpoch(epoch, start int64) error {
	t.wmu.Lock()
	defer t.wmu.Unlock()
	if _, _, _, err := t.truncateView(); err != nil {
		return err
	}
	es := t.epochs // only wmu holders replace it
	if epoch < 0 || start < 0 || start > MaxOffset {
		return fmt.Errorf("%w: topic %q: epoch %d at offset %d", ErrInvalidEpoch, t.name, epoch, start)
	}
	keep := len(es)
	if keep > 0 {
		last := es[keep-1]
		switch {
		case epoch < last.Epoch:
			return fmt.Errorf("%w: topic %q: epoch %d is below the last recorded, %d", ErrInvalidEpoch, t.name, epoch, last.Epoch)
		case start < last.Start:
			return fmt.Errorf("%w: topic %q: epoch %d at offset %d, before epoch %d's start %d", ErrInvalidEpoch, t.name, epoch, start, last.Epoch, last.Start)
		case epoch == last.Epoch:
			return nil
		case start == last.Start:
			keep-- // the last epoch holds no offsets: replaced
		}
	}
	ns := make([]EpochStart, keep, keep+1)
	copy(ns, es)
	ns = append(ns, EpochStart{epoch, start})
	if len(ns) > maxEpochs {
		ns = ns[len(ns)-maxEpochs:]
	}
	return t.writeEpochs(ns)
}

// writeEpochs writes es as the epochs file of every volume, durably and
// in volume order, then makes it the topic's. wmu must be held.
func (t *topic) writeEpochs(es []EpochStart) error {
	b := appendEpochs(nil, es)
	for v := range t.s.opts.Volumes {
		if err := t.s.writeFileDurable(filepath.Join(t.s.topicDir(v, t.name), epochsName), b); err != nil {
			return fmt.Errorf("storage: topic %q: epochs file on volume %s: %w", t.name, t.s.opts.Volumes[v], err)
		}
	}
	t.mu.Lock()
	t.epochs = es
	t.mu.Unlock()
	return nil
}

// dropEpochsFrom forgets the epochs that start at or after next, the
// topic's new next offset after a cut, rewriting the file if any went.
// wmu must be held.
func (t *topic) dropEpochsFrom(next int64) error {
	es := t.epochs
	k := sort.Search(len(es), func(i int) bool { return es[i].Start >= next })
	if k == len(es) {
		return nil
	}
	return t.writeEpochs(es[:k:k])
}

// Epochs returns the leader epochs recorded for the log, ascending.
func (l *Log) Epochs() ([]EpochStart, error) {
	t, err := l.live()
	if err != nil {
		return nil, err
	}
	t.mu.RLock()
	defer t.mu.RUnlock()
	return append([]EpochStart(nil), t.epochs...), nil
}

// EpochEnd answers KIP-279's OffsetForLeaderEpoch for the log: the
// largest recorded epoch at or below epoch (found), and the offset where
// it ended: the next entry's start, or the topic's next offset for the
// last entry. With no entry at or below epoch, found is -1 and end the
// topic's oldest offset.
func (l *Log) EpochEnd(epoch int64) (found, end int64, err error) {
	t, err := l.live()
	if err != nil {
		return 0, 0, err
	}
	t.mu.RLock()
	defer t.mu.RUnlock()
	es := t.epochs
	i := sort.Search(len(es), func(i int) bool { return es[i].Epoch > epoch }) - 1
	switch {
	case i < 0:
		return -1, t.start, nil
	case i+1 < len(es):
		return es[i].Epoch, es[i+1].Start, nil
	}
	return es[i].Epoch, t.next, nil
}

// epochs loads the topic's epochs file: the reference copy is the one of
// the last volume, in reverse volume order, whose file is valid (a file
// is written in volume order, so the last volume never holds an epoch
// the others lack), and every volume whose copy is missing or differs
// gets it, durably, counted as a repair. No valid copy anywhere leaves
// the topic without epochs, logged as an error and counted as
// unreadable; nothing about the file fails Open, and a repair that
// cannot be written is only logged (the next SetEpoch rewrites every
// copy).
func (r *recovery) epochs(t *topic, dirs []string) error {
	have := make([][]byte, len(dirs))
	ref := -1
	var es []EpochStart
	for v := len(dirs) - 1; v >= 0; v-- {
		b, err := r.readSmall(filepath.Join(dirs[v], epochsName), maxEpochsFileSize)
		if err != nil {
			return err
		}
		have[v] = b
		if b == nil || ref >= 0 {
			continue
		}
		if got, err := parseEpochs(b); err == nil {
			ref, es = v, got
		} else {
			r.logger().Warn("epochs file damaged", "topic", r.name, "volume", r.s.opts.Volumes[v], "err", err)
		}
	}
	if ref < 0 {
		for v, b := range have {
			if b != nil {
				r.s.stats.unreadable.Add(1)
				r.logger().Error("epochs file unreadable on every volume: the topic starts without leader epochs", "topic", r.name, "volume", r.s.opts.Volumes[v])
				break
			}
		}
		return nil
	}
	for v, dir := range dirs {
		if bytes.Equal(have[v], have[ref]) {
			continue
		}
		if err := r.s.writeFileDurable(filepath.Join(dir, epochsName), have[ref]); err != nil {
			r.logger().Error("epochs file not repaired", "topic", r.name, "volume", r.s.opts.Volumes[v], "err", err)
			continue
		}
		r.repaired(v, "epochs file", int64(len(have[ref])))
	}
	t.epochs = es
	return nil
}
