package main

import (
	"time"

	"golang.org/x/sys/unix"
)

// sleepUntil waits until t the way haraqa-bench paces (bench/pace.go): a
// timer until the last 2 ms, then nanosleep(2) with no timer slack, since Go's timers wake in
// whole milliseconds of epoll_wait and a producer paced by them alone sends
// bursts whose lateness the latency would measure.
func sleepUntil(t time.Time) {
	for {
		d := time.Until(t)
		switch {
		case d <= 0:
			return
		case d > 2*time.Millisecond:
			time.Sleep(d - 2*time.Millisecond)
		default:
			_ = unix.Prctl(unix.PR_SET_TIMERSLACK, 1, 0, 0, 0)
			ts := unix.NsecToTimespec(int64(d))
			_ = unix.Nanosleep(&ts, nil)
		}
	}
}
