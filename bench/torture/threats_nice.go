package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// On a two-core machine the attackers' own load would take a core from
// the server and the victim that a real attacker, on machines of its own,
// does not. So threats's attacking process (this one) runs under
// SCHED_IDLE: it gets only the CPU time no other thread wants, and a CPU
// that runs only it counts as idle when the kernel places a waking thread,
// so the server's threads spread over both cores as they would with the
// attackers elsewhere. (A nice value is not enough: the server's threads,
// woken by each other, stay stacked on one core while the attackers keep
// the other.) The server and the victim process run as usual, under
// SCHED_OTHER, and the server still gets every request the attackers send.
var threatAttackersIdle = flag.Bool("threat-attackers-idle", true, "threats: run the attackers under SCHED_IDLE, as if on other machines (needs root; false: at the server's priority)")

// lifted says whether backgroundAttackers moved this process to
// SCHED_IDLE, so that the processes threats starts must be moved back.
var lifted bool

const schedIdle = 5 // SCHED_IDLE, sched(7)

// backgroundAttackers moves every thread of this process to SCHED_IDLE
// (threads made later inherit it) and returns what it did and what undoes
// it. Leaving SCHED_IDLE needs root: without it the processes run level.
func backgroundAttackers() (string, func()) {
	if !*threatAttackersIdle {
		return "attackers at the server's priority", func() {}
	}
	if os.Geteuid() != 0 {
		return "attackers at the server's priority (SCHED_IDLE needs root to undo)", func() {}
	}
	if err := setPolicy(schedIdle); err != nil {
		_ = setPolicy(0)
		return fmt.Sprintf("attackers at the server's priority (SCHED_IDLE: %v)", err), func() {}
	}
	lifted = true
	return "attackers under SCHED_IDLE, the server and the victim under SCHED_OTHER", func() {
		lifted = false
		_ = setPolicy(0)
	}
}

// setPolicy sets policy (nice 0) on every thread of this process.
func setPolicy(policy uint32) error {
	var errs []error
	for _, tid := range threads() {
		attr := unix.SchedAttr{Policy: policy}
		if err := unix.SchedSetAttr(tid, &attr, 0); err != nil && !errors.Is(err, unix.ESRCH) {
			errs = append(errs, fmt.Errorf("thread %d: %w", tid, err))
		}
	}
	return errors.Join(errs...)
}

// threads lists this process's thread ids.
func threads() []int {
	ents, _ := os.ReadDir("/proc/self/task")
	tids := make([]int, 0, len(ents))
	for _, e := range ents {
		if tid, err := strconv.Atoi(e.Name()); err == nil {
			tids = append(tids, tid)
		}
	}
	return tids
}

// schedOther returns the command line that runs name with args under
// SCHED_OTHER when this process is under SCHED_IDLE (chrt, util-linux).
func schedOther(name string, args []string) (string, []string) {
	if !lifted {
		return name, args
	}
	return "chrt", append([]string{"--other", "0", name}, args...)
}

// victimSlice is the scheduler slice the victim process asks for (Linux
// 6.12 and later, EEVDF): a thread with a shorter slice than the running
// one may preempt it on waking, rather than wait out the running
// thread's slice (milliseconds), so the victim's own wake-ups do not
// count in what it measures of the server.
const victimSlice = 100 * time.Microsecond

// shortSlice asks for slice on every thread of this process; threads made
// later inherit it. An older kernel ignores the request.
func shortSlice(slice time.Duration) error {
	var errs []error
	for _, tid := range threads() {
		attr := unix.SchedAttr{Runtime: uint64(slice)}
		if err := unix.SchedSetAttr(tid, &attr, 0); err != nil && !errors.Is(err, unix.ESRCH) {
			errs = append(errs, fmt.Errorf("thread %d: %w", tid, err))
		}
	}
	return errors.Join(errs...)
}
