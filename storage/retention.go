package storage

import "time"

// applyRetention deletes, in every topic, the oldest whole segments that are
// past RetentionAge or beyond RetentionBytes. The newest segment always stays.
func (s *Store) applyRetention() {
	topics := s.allTopics()
	now := s.opts.Now().UnixNano()
	for _, t := range topics {
		before := t.retentionPoint(now, s.opts.RetentionAge, s.opts.RetentionBytes)
		if before < 0 {
			continue
		}
		if err := t.truncate(before); err != nil {
			s.opts.Logger.Error("retention", "topic", t.name, "err", err)
		}
	}
}

// retentionPoint returns the base of the first segment to keep, or -1 when
// nothing is to go.
func (t *topic) retentionPoint(now int64, age time.Duration, maxBytes int64) int64 {
	t.mu.RLock()
	defer t.mu.RUnlock()
	var total int64
	for _, sg := range t.segs {
		total += sg.size
	}
	k := 0
	for k < len(t.segs)-1 {
		sg := t.segs[k]
		old := age > 0 && sg.lastTime < now-int64(age)
		big := maxBytes > 0 && total > maxBytes
		if !old && !big {
			break
		}
		total -= sg.size
		k++
	}
	if k == 0 || t.segs[k].base <= t.start {
		return -1
	}
	return t.segs[k].base
}
