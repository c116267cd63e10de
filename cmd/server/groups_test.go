package main

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/haraqa/haraqa/client"
)

// TestGroupCommitsSurviveKill: commits acknowledged before a kill -9 of
// the server binary are there after the restart, with each fsync policy
// (the page cache holds them under "never" and "interval"), and the lease held at the
// kill is gone with the process.
func TestGroupCommitsSurviveKill(t *testing.T) {
	bin := buildServer(t, t.TempDir())
	for _, fsync := range []string{"never", "interval", "always"} {
		t.Run("fsync="+fsync, func(t *testing.T) {
			vols := []string{t.TempDir(), t.TempDir()}
			args := append([]string{"-tcp", strconv.Itoa(freePort(t)), "-listen", "127.0.0.1", "-fsync", fsync}, vols...)
			srv := startServer(t, bin, args...)
			ctx, cancel := context.WithTimeout(context.Background(), 2*ioTimeout)
			defer cancel()
			c, err := client.Dial(ctx, srv.addr, client.WithAutoCreate(true), client.WithRetries(0, 0))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			msgs := make([][]byte, 1000)
			for i := range msgs {
				msgs[i] = []byte(strconv.Itoa(i))
			}
			if _, err := c.Produce(ctx, "work", msgs...); err != nil {
				t.Fatal(err)
			}
			held, _ := c.NewGroupReader("held", "work", client.WithLeaseDuration(time.Minute))
			if _, err := held.Start(ctx); err != nil {
				t.Fatal(err)
			}

			// Committers move their groups forward one offset at a time until
			// the server dies; acked[i] is the last commit it acknowledged.
			const groups = 4
			var acked [groups]atomic.Int64
			var wg sync.WaitGroup
			var total atomic.Int64
			for i := range groups {
				acked[i].Store(-1)
				wg.Add(1)
				go func() {
					defer wg.Done()
					for off := int64(1); off <= 1000; off++ {
						if err := c.CommitOffset(ctx, fmt.Sprint("g", i), "work", off); err != nil {
							return // the server is gone
						}
						acked[i].Store(off)
						total.Add(1)
					}
				}()
			}
			deadline := time.Now().Add(ioTimeout)
			for total.Load() < 200 && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
			if err := srv.cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			wg.Wait()
			srv.exitCode()

			srv = startServer(t, bin, args...)
			c2, err := client.Dial(ctx, srv.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c2.Close()
			for i := range groups {
				o, err := c2.FetchOffset(ctx, fmt.Sprint("g", i), "work")
				if err != nil {
					t.Fatal(err)
				}
				// The commit in flight at the kill may or may not be there.
				if a := acked[i].Load(); o.Committed != a && o.Committed != a+1 && !(a == -1 && o.Committed == client.NoOffset) {
					t.Errorf("group g%d: committed %d after the restart, last acknowledged %d", i, o.Committed, a)
				}
			}
			if total.Load() == 0 {
				t.Fatal("no commit acknowledged before the kill")
			}
			// The killed member's lease died with the process: a new member
			// takes the group at once.
			g, _ := c2.NewGroupReader("held", "work", client.WithoutLeaseWait())
			if _, err := g.Start(ctx); err != nil {
				t.Fatalf("lease after the restart: %v", err)
			}
			g.Close()
		})
	}
}
