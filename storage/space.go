package storage

import (
	"fmt"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// spaceCheck is how often free space is measured.
const spaceCheck = time.Second

// maxAutoFloor bounds the automatic free-space floor.
const maxAutoFloor = 64 << 20

// space watches the volumes' free space against the floor.
type space struct {
	free  []atomic.Int64 // bytes free per volume, last measured (-1: unknown)
	floor []atomic.Int64 // the floor per volume; 0: none
	low   atomic.Int32   // volume+1 of a volume under its floor, 0 if none
}

// initSpace sets each volume's floor and measures the volumes.
func (s *Store) initSpace() {
	n := len(s.opts.Volumes)
	s.space.free = make([]atomic.Int64, n)
	s.space.floor = make([]atomic.Int64, n)
	for v := range s.opts.Volumes {
		floor := s.opts.MinFreeBytes
		if floor < 0 {
			_, total, err := statVolume(s.opts.Volumes[v])
			floor = 0
			if err == nil {
				floor = min(total/50, maxAutoFloor)
			}
		}
		s.space.floor[v].Store(floor)
	}
	s.measureSpace()
}

// statVolume returns the bytes free to unprivileged writers and the size
// of dir's file system.
func statVolume(dir string) (free, total int64, err error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, 0, err
	}
	return int64(st.Bavail) * st.Bsize, int64(st.Blocks) * st.Bsize, nil
}

// measureSpace measures every volume's free space and sets or clears the
// low-space state.
func (s *Store) measureSpace() {
	low := int32(0)
	for v, dir := range s.opts.Volumes {
		free, _, err := statVolume(dir)
		if err != nil {
			s.space.free[v].Store(-1)
			continue
		}
		s.space.free[v].Store(free)
		if low == 0 && free < s.space.floor[v].Load() {
			low = int32(v + 1)
		}
	}
	if old := s.space.low.Swap(low); old != low {
		if low != 0 {
			s.opts.Logger.Warn("volume below its free-space floor: appends are refused until space returns",
				"volume", s.opts.Volumes[low-1], "free", s.space.free[low-1].Load(), "min_free_bytes", s.space.floor[low-1].Load())
		} else {
			s.opts.Logger.Info("free space is back above the floor on every volume: appends resume")
		}
	}
}

// spaceErr is ErrNoSpace, naming the volume's index (not its path: the
// message may reach clients), when a volume is under its floor.
func (s *Store) spaceErr() error {
	v := s.space.low.Load()
	if v == 0 {
		return nil
	}
	return fmt.Errorf("%w: volume %d has %d bytes free, under its floor of %d (MinFreeBytes)",
		ErrNoSpace, v, s.space.free[v-1].Load(), s.space.floor[v-1].Load())
}

// VolumeFree returns each volume's free bytes as last measured (every
// second; -1 where it could not be measured).
func (s *Store) VolumeFree() []int64 {
	out := make([]int64, len(s.space.free))
	for v := range out {
		out[v] = s.space.free[v].Load()
	}
	return out
}
