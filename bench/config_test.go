package bench

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestValidate(t *testing.T) {
	cases := []struct {
		name   string
		change func(*Config)
		want   string // part of the error; "" for valid
	}{
		{"defaults", func(*Config) {}, ""},
		{"embedded", func(c *Config) { c.Embedded, c.Addr = true, "" }, ""},
		{"unknown mode", func(c *Config) { c.Mode = "fetch" }, "mode"},
		{"size below header", func(c *Config) { c.Size = HeaderSize - 1 }, "smallest message is 24 bytes"},
		{"size at header", func(c *Config) { c.Size = HeaderSize }, ""},
		{"zero batch", func(c *Config) { c.Batch = 0 }, "batch"},
		{"zero producers", func(c *Config) { c.Producers = 0 }, "producers"},
		{"zero topics", func(c *Config) { c.Topics = 0 }, "topics"},
		{"consume without consumers", func(c *Config) { c.Mode, c.Consumers = ModeConsume, 0 }, "consumers"},
		{"produce ignores consumers", func(c *Config) { c.Consumers = 0 }, ""},
		{"both with fewer consumers than topics", func(c *Config) { c.Mode, c.Topics, c.Consumers = ModeBoth, 3, 2 }, "-consumers >= -topics"},
		{"messages and duration", func(c *Config) { c.Messages, c.Duration = 10, time.Second }, "not both"},
		{"neither messages nor duration", func(c *Config) { c.Messages, c.Duration = 0, 0 }, "give -messages or -duration"},
		{"negative messages", func(c *Config) { c.Messages, c.Duration = -1, 0 }, "negative"},
		{"negative warmup", func(c *Config) { c.Warmup = -time.Second }, "warmup"},
		{"negative linger", func(c *Config) { c.Linger = -time.Millisecond }, "linger"},
		{"no batch slot", func(c *Config) { c.MaxInFlight = 0 }, "in flight"},
		{"negative rate", func(c *Config) { c.Rate = -1 }, "rate"},
		{"rate in consume mode", func(c *Config) { c.Mode, c.Rate = ModeConsume, 100 }, "does not apply to consume"},
		{"bad single", func(c *Config) { c.Single = "both" }, "single"},
		{"producer with batch", func(c *Config) { c.Single, c.Batch = SingleProducer, 10 }, "-batch 1 only"},
		{"producer with batch 1", func(c *Config) { c.Single, c.Batch = SingleProducer, 1 }, ""},
		{"bad compress", func(c *Config) { c.Compress = "gzip" }, "compress"},
		{"zstd", func(c *Config) { c.Compress = "zstd" }, ""},
		{"bad fsync", func(c *Config) { c.Fsync = "sometimes" }, "fsync"},
		{"zero volumes", func(c *Config) { c.Volumes = 0 }, "volumes"},
		{"batch over the frame limit", func(c *Config) { c.Size, c.Batch = 1<<20, 100 }, "frame limit"},
		{"no address", func(c *Config) { c.Addr = "" }, "-addr"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultConfig()
			tc.change(&c)
			err := c.Validate()
			if tc.want == "" {
				if err != nil {
					t.Fatalf("valid config rejected: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want ErrUsage mentioning %q", err, tc.want)
			}
		})
	}
}

func TestBoundShare(t *testing.T) {
	b := bound{messages: 10}
	sum := int64(0)
	for i := range 3 {
		sum += b.share(i, 3)
	}
	if sum != 10 || b.share(0, 3) != 4 || b.share(2, 3) != 3 {
		t.Fatalf("shares of 10 among 3: %d %d %d", b.share(0, 3), b.share(1, 3), b.share(2, 3))
	}
	if (bound{duration: time.Second}).share(0, 2) != 0 {
		t.Fatal("a duration bound has a message share")
	}
}

func TestSplitRanges(t *testing.T) {
	// More consumers than topics: each topic's offsets split among its readers.
	got := splitRanges([]int64{10, 7}, 5)
	want := [][]consumeRange{
		{{0, 0, 3}}, {{1, 0, 3}}, {{0, 3, 6}}, {{1, 3, 7}}, {{0, 6, 10}},
	}
	if len(got) != len(want) {
		t.Fatalf("got %v", got)
	}
	for i := range want {
		if len(got[i]) != len(want[i]) || got[i][0] != want[i][0] {
			t.Fatalf("consumer %d: %v, want %v", i, got[i], want[i])
		}
	}
	// Fewer consumers than topics: whole topics round robin.
	got = splitRanges([]int64{1, 2, 3}, 2)
	if len(got[0]) != 2 || got[0][1] != (consumeRange{2, 0, 3}) || len(got[1]) != 1 || got[1][0] != (consumeRange{1, 0, 2}) {
		t.Fatalf("got %v", got)
	}
}
