package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/haraqa/haraqa/client"
	"github.com/haraqa/haraqa/protocol"
)

// tmpfsSize is the size of the volume filled in the ENOSPC phase.
const tmpfsSize = 32 << 20

// runENOSPC fills a small tmpfs holding both volumes with one topic (hog)
// while another (victim) keeps producing; then kills the server and
// restarts it on the full disk, and finally deletes hog so that victim
// writes again without a restart.
func runENOSPC(ctx context.Context, e *env) (string, error) {
	mnt := filepath.Join(e.dir, "enospc")
	if err := os.MkdirAll(mnt, 0o755); err != nil {
		return "", err
	}
	if err := syscall.Mount("tmpfs", mnt, "tmpfs", 0, fmt.Sprintf("size=%d", tmpfsSize)); err != nil {
		return fmt.Sprintf("skipped: cannot mount a tmpfs (%v; needs root)", err), nil
	}
	defer syscall.Unmount(mnt, syscall.MNT_DETACH)
	spec := serverSpec{bin: e.bin, volumes: []string{filepath.Join(mnt, "v1"), filepath.Join(mnt, "v2")},
		args: []string{"-ballast", "0"}}
	s, err := start(spec)
	if err != nil {
		return "", err
	}
	defer func() {
		if s != nil && s.alive() {
			s.kill()
		}
	}()
	l := newLedger()
	victim := startSteady(ctx, s, l, "victim", 900)
	fill, problem, err := fillDisk(ctx, s, l)
	if err != nil {
		victim.halt()
		return fill, err
	}
	if err := victim.halt(); err != nil {
		return fill, errors.Join(problem, fmt.Errorf("while hog filled the disk: %w", err))
	}
	line := fmt.Sprintf("tmpfs %d MiB, 2 volumes: %s; victim acked %d, refused %d (no space), never read-only",
		tmpfsSize>>20, fill, victim.acked.Load(), victim.nospace.Load())
	s, restartProblem, err := restartFull(ctx, s, spec, l, mnt)
	if err != nil {
		return line, errors.Join(problem, restartProblem, err)
	}
	problem = errors.Join(problem, restartProblem)
	if restartProblem != nil {
		line += fmt.Sprintf("; kill -9, restart on the full disk FAILED, after growing the tmpfs to %d MiB both intact", tmpfsSize*3/2>>20)
	} else {
		line += "; kill -9 with a batch on v1 only, the disk filled to the last byte, restart: the unacknowledged batch dropped, both intact"
	}
	resumed, err := deleteHog(ctx, s, l)
	if err != nil {
		return line, errors.Join(problem, err)
	}
	return line + "; " + resumed, errors.Join(problem, s.stop())
}

// fillDisk produces large batches to hog until it is refused for space
// ten times in a row, then checks both topics. A hog turned read-only is
// a problem, reported, after which the phase goes on.
func fillDisk(ctx context.Context, s *server, l *ledger) (line string, problem, err error) {
	c, err := s.dial(ctx)
	if err != nil {
		return "", nil, err
	}
	defer c.Close()
	refused, acked := 0, 0
	for deadline := time.Now().Add(30 * time.Second); refused < 10 && problem == nil; {
		if time.Now().After(deadline) {
			return "", nil, fmt.Errorf("hog never refused for space in 30s (%d batches acked)", acked)
		}
		err := l.produce(ctx, c, "hog", 901, 2000)
		switch {
		case err == nil:
			acked++
			refused = 0
		case errors.Is(err, client.ErrNoSpace):
			refused++
			time.Sleep(10 * time.Millisecond)
		case errors.Is(err, client.ErrReadOnly):
			problem = fmt.Errorf("hog turned read-only after %d batches instead of being refused with code 16: %w\n%s", acked, err, tail(s.output()))
		default:
			return "", nil, fmt.Errorf("hog after %d batches: %w\n%s", acked, err, tail(s.output()))
		}
	}
	if !s.alive() {
		return "", problem, errors.New("the server died when the disk filled")
	}
	res, err := l.verify(ctx, c, "hog")
	how := "refused with code 16 (no space)"
	if problem != nil {
		how = "READ-ONLY (code 12)"
	}
	return fmt.Sprintf("hog acked %d batches (%d messages), then %s", acked, res.acked, how), problem, err
}

// restartFull kills the server while the disk is full, starts it again on
// the full disk and checks every acknowledged message. A server that does
// not start on the full disk is a problem, reported; the tmpfs is then
// grown by half so that the rest of the phase can check the data.
func restartFull(ctx context.Context, s *server, spec serverSpec, l *ledger, mnt string) (_ *server, problem, err error) {
	s.kill()
	junk := filepath.Join(mnt, "junk")
	if err := tearBetweenVolumes(spec.volumes, "victim", l, junk); err != nil {
		return nil, nil, err
	}
	defer os.Remove(junk)
	if s, err = start(spec); err != nil {
		problem = fmt.Errorf("restart on the full disk after kill -9: %w", err)
		opts := fmt.Sprintf("size=%d", tmpfsSize*3/2)
		if err := syscall.Mount("tmpfs", mnt, "tmpfs", syscall.MS_REMOUNT, opts); err != nil {
			return nil, problem, fmt.Errorf("grow the tmpfs: %w", err)
		}
		if s, err = start(spec); err != nil {
			return nil, problem, fmt.Errorf("restart once the tmpfs grew: %w", err)
		}
	}
	if _, err := checkServer(ctx, s, l); err != nil {
		return s, problem, fmt.Errorf("after a kill -9 and restart on the full disk: %w", err)
	}
	if problem == nil && !strings.Contains(s.output(), "unacknowledged tail dropped") {
		problem = fmt.Errorf("restart on the full disk: no unacknowledged tail dropped logged\n%s", tail(s.output()))
	}
	return s, problem, nil
}

// tearBetweenVolumes leaves what a kill between the two volumes' writes
// leaves: a valid batch of 100 messages (over 8 KiB, more than the free
// part of a tmpfs page) at topic's next offset on the first volume's last
// segment only. Then it fills the file system with junk to the last byte,
// so that copying the batch to the second volume at start-up fails for
// space.
func tearBetweenVolumes(vols []string, topic string, l *ledger, junk string) error {
	logs, err := files(filepath.Join(vols[0], "topics", topic), ".log")
	if err != nil || len(logs) == 0 {
		return fmt.Errorf("segments of %s: %d, %v", topic, len(logs), err)
	}
	slices.Sort(logs)
	last := logs[len(logs)-1]
	data, err := os.ReadFile(last)
	if err != nil {
		return err
	}
	next := int64(-1)
	for b := data; len(b) > 0; {
		bt, n, err := protocol.ParseBatch(b)
		if err != nil {
			return fmt.Errorf("%s: %w", last, err)
		}
		next = bt.BaseOffset + int64(bt.Count)
		b = b[n:]
	}
	if next < 0 {
		return fmt.Errorf("%s is empty", last)
	}
	seq := l.next(902, 100)
	msgs := make([][]byte, 100)
	for i := range msgs {
		msgs[i] = payload(902, seq+i)
	}
	batch := protocol.AppendBatch(nil, msgs...)
	protocol.StampBatch(batch, next, time.Now().UnixNano())
	f, err := os.OpenFile(last, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return err
	}
	_, werr := f.Write(batch)
	if err := errors.Join(werr, f.Close()); err != nil {
		return fmt.Errorf("append the torn batch: %w", err)
	}
	j, err := os.Create(junk)
	if err != nil {
		return err
	}
	defer j.Close()
	for _, chunk := range []int{1 << 16, 1 << 12, 1} {
		buf := make([]byte, chunk)
		for {
			if _, err := j.Write(buf); err != nil {
				if errors.Is(err, syscall.ENOSPC) {
					break
				}
				return fmt.Errorf("fill the disk: %w", err)
			}
		}
	}
	return nil
}

// deleteHog deletes hog and waits for victim to be acknowledged again.
func deleteHog(ctx context.Context, s *server, l *ledger) (string, error) {
	c, err := s.dial(ctx)
	if err != nil {
		return "", err
	}
	defer c.Close()
	if err := c.DeleteTopic(ctx, "hog"); err != nil {
		return "", fmt.Errorf("delete hog: %w", err)
	}
	l.forget("hog")
	deleted := time.Now()
	victim := startSteady(ctx, s, l, "victim", 900)
	for victim.acked.Load() == 0 && !victim.failed() {
		if time.Since(deleted) > 15*time.Second {
			victim.halt()
			return "", fmt.Errorf("victim still refused 15s after hog was deleted (%d refusals)", victim.nospace.Load())
		}
		time.Sleep(time.Millisecond)
	}
	took := time.Duration(victim.lastOK.Load() - deleted.UnixNano())
	time.Sleep(200 * time.Millisecond)
	if err := victim.halt(); err != nil {
		return "", fmt.Errorf("after hog was deleted: %w", err)
	}
	res, err := l.verify(ctx, c, "victim")
	return fmt.Sprintf("hog deleted, victim acknowledged again after %s without a restart, %d victim messages intact",
		took.Round(time.Millisecond), res.acked), err
}
