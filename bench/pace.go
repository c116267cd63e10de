package bench

import (
	"context"
	"time"

	"golang.org/x/sys/unix"
)

// preciseBelow is the longest wait sleepUntil makes with nanosleep(2).
const preciseBelow = 2 * time.Millisecond

// sleepUntil waits until t, or until ctx ends (false).
//
// Go's timers fire when the runtime's poller next wakes, and its epoll_wait
// timeouts are whole milliseconds: on an otherwise idle process a 100 us
// sleep takes about 1.1 ms. An open-model producer at 10,000 msgs/s that
// paced with timers would send bursts of ten every millisecond, and the
// latency measured from each message's intended send time would be mostly
// the pacer's own lateness. So the last preciseBelow of a wait is made with
// nanosleep(2) on the goroutine's thread, an hrtimer with no timer slack,
// late by the wake-up alone (25 us here, against 1.1 ms); the runtime runs
// other goroutines on other threads meanwhile.
func sleepUntil(ctx context.Context, t time.Time) bool {
	for {
		if ctx.Err() != nil {
			return false
		}
		d := time.Until(t)
		switch {
		case d <= 0:
			return true
		case d > preciseBelow:
			tm := time.NewTimer(d - preciseBelow)
			select {
			case <-tm.C:
			case <-ctx.Done():
				tm.Stop()
				return false
			}
		default:
			// A thread's timer slack (50 us by default) lets the kernel
			// wake it that much late; the pacing goroutine's thread, and
			// any it moves to, sleeps without it.
			_ = unix.Prctl(unix.PR_SET_TIMERSLACK, 1, 0, 0, 0)
			ts := unix.NsecToTimespec(int64(d))
			_ = unix.Nanosleep(&ts, nil) // EINTR: the loop sleeps what is left
		}
	}
}
