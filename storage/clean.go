package storage

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
)

// A clean stop's mark, and what recovery found unreadable: what a
// replicated topic's replica needs to know of its copy after a restart.

// cleanName marks a volume whose store was closed cleanly: everything
// appended was on disk when it was written. Open removes it (durably)
// before anything else is written, so a store that stops any other way
// (a crash, a kill, a power loss) starts without it.
const cleanName = "CLEAN"

// takeCleanMarks records whether every volume holds the clean mark
// (CleanStart) and removes it from each.
func (s *Store) takeCleanMarks() error {
	s.cleanStart = true
	for _, v := range s.opts.Volumes {
		p := filepath.Join(v, cleanName)
		if _, err := s.fs.Stat(p); err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("storage: volume %s: the clean-stop mark: %w", v, err)
			}
			s.cleanStart = false
			continue
		}
		if err := s.fs.Remove(p); err != nil {
			return fmt.Errorf("storage: volume %s: removing the clean-stop mark: %w", v, err)
		}
		if err := s.fs.SyncDir(v); err != nil {
			return fmt.Errorf("storage: volume %s: removing the clean-stop mark: %w", v, err)
		}
	}
	return nil
}

// markClean writes the clean mark on every volume (Close, once every
// file is on disk).
func (s *Store) markClean() error {
	for _, v := range s.opts.Volumes {
		if err := s.writeFileDurable(filepath.Join(v, cleanName), nil); err != nil {
			return fmt.Errorf("storage: volume %s: the clean-stop mark: %w", v, err)
		}
	}
	return nil
}

// anyReadOnly reports whether a topic turned read-only: its files may
// lack what was appended to it, so the stop is not clean.
func (s *Store) anyReadOnly() bool {
	for _, t := range s.allTopics() {
		if t.readOnly() != nil {
			return true
		}
	}
	return false
}

// CleanStart reports whether the store's last stop was a clean Close:
// every volume was marked clean once all its files were on disk. After a
// crash, a kill or a power loss it is false, and under a -fsync policy
// other than always the logs may lack batches that were acknowledged
// before the stop (what a replicated topic's replica must not lead with).
func (s *Store) CleanStart() bool { return s.cleanStart }

// FirstUnreadable returns the first offset of the log that
// recovery found corrupted on every volume (an unreadable range, which
// reads answer with ErrUnreadable), and whether there is one. A
// replicated topic's replica cuts its log there and copies the rest from
// its leader again.
func (l *Log) FirstUnreadable() (int64, bool, error) {
	t, err := l.live()
	if err != nil {
		return 0, false, err
	}
	t.mu.RLock()
	defer t.mu.RUnlock()
	first, ok := int64(0), false
	for _, r := range t.bad {
		if r.to > r.from && (!ok || r.from < first) {
			first, ok = r.from, true
		}
	}
	return first, ok, nil
}
