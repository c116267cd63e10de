package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/haraqa/haraqa/client"
)

// startFlag is consume's -offset: an offset (negative counts back from the
// end), "end" (only messages produced from now on), or "@TIME" (the first
// message appended at or after TIME, RFC 3339 or a date).
type startFlag struct {
	set    bool
	end    bool
	at     time.Time // non-zero for @TIME
	offset int64
}

func (f *startFlag) String() string {
	switch {
	case !f.set:
		return ""
	case f.end:
		return "end"
	case !f.at.IsZero():
		return "@" + f.at.Format(time.RFC3339Nano)
	}
	return strconv.FormatInt(f.offset, 10)
}

func (f *startFlag) Set(s string) error {
	*f = startFlag{set: true}
	switch {
	case s == "end":
		f.end = true
	case strings.HasPrefix(s, "@"):
		t, err := parseTime(s[1:])
		if err != nil {
			return err
		}
		f.at = t
	default:
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return fmt.Errorf("want an offset, end or @TIME (RFC 3339, e.g. @2026-12-01T09:00:00Z), got %q", s)
		}
		f.offset = n
	}
	return nil
}

// parseTime reads an RFC 3339 time (fractional seconds allowed) or a date,
// which means its midnight UTC.
func parseTime(s string) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	if t, err := time.Parse(time.DateOnly, s); err == nil {
		return t, nil
	}
	return time.Time{}, fmt.Errorf("time %q: want RFC 3339 (2026-12-01T09:00:00Z, 2026-12-01T10:00:00+01:00) or a date (2026-12-01)", s)
}

// since makes f the time d ago.
func (f *startFlag) since(d time.Duration) {
	*f = startFlag{set: true, at: time.Now().Add(-d)}
}

// resolve returns the offset f names on topic, whose info is given;
// unset, the oldest kept.
func (f *startFlag) resolve(ctx context.Context, c *client.Client, topic string, info client.TopicInfo) (int64, error) {
	switch {
	case !f.set:
		return info.Oldest, nil
	case f.end:
		return info.Next, nil
	case !f.at.IsZero():
		return c.OffsetAt(ctx, topic, f.at)
	}
	return f.offset, nil
}
