package client_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/haraqa/haraqa/broker/brokertest"
	"github.com/haraqa/haraqa/client"
)

// joinAddrs is the comma-separated list of the servers' addresses.
func joinAddrs(srvs ...*brokertest.Server) string {
	var a []string
	for _, s := range srvs {
		a = append(a, s.Addr)
	}
	return strings.Join(a, ",")
}

// topicsOn lists the topics of one server, through a client of it alone.
func topicsOn(t *testing.T, ctx context.Context, addr string) []string {
	t.Helper()
	c, err := client.Dial(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l, err := c.ListTopics(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestSeveralServers(t *testing.T) {
	// 300 topics through every op on three servers and a fourth: more than
	// testCtx's 30 s on a loaded machine.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s1, s2, s3 := brokertest.Start(t, 1), brokertest.Start(t, 1), brokertest.Start(t, 1)
	c, err := client.Dial(ctx, joinAddrs(s1, s2, s3))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := c.Servers(); !slices.Equal(got, []string{s1.Addr, s2.Addr, s3.Addr}) {
		t.Fatalf("Servers() = %v", got)
	}

	// 300 topics, produced through the client: each topic's first batch
	// at offset 0, its second at 2.
	const n = 300
	name := func(i int) string { return fmt.Sprintf("t%03d", i) }
	for i := range n {
		for want := int64(0); want <= 2; want += 2 {
			off, err := c.Produce(ctx, name(i), []byte(name(i)+"-a"), []byte(name(i)+"-b"))
			if err != nil || off != want {
				t.Fatalf("produce %s: offset %d, %v; want %d", name(i), off, err, want)
			}
		}
	}
	where := map[string]string{} // topic -> address
	for _, s := range []*brokertest.Server{s1, s2, s3} {
		l := topicsOn(t, ctx, s.Addr)
		if len(l) == 0 || len(l) > n/2 {
			t.Errorf("server %s holds %d of %d topics", s.Addr, len(l), n)
		}
		for _, tp := range l {
			if w, ok := where[tp]; ok {
				t.Errorf("topic %s on both %s and %s", tp, w, s.Addr)
			}
			where[tp] = s.Addr
		}
		t.Logf("%s holds %d topics", s.Addr, len(l))
	}
	if len(where) != n {
		t.Fatalf("the servers hold %d topics, want %d", len(where), n)
	}
	all, err := c.ListTopics(ctx, "")
	if err != nil || len(all) != n || !slices.IsSorted(all) {
		t.Fatalf("ListTopics over three servers: %d topics, sorted %v, %v", len(all), slices.IsSorted(all), err)
	}
	if l, err := c.ListTopicsRegex(ctx, "t1", "5$"); err != nil || len(l) != 10 {
		t.Fatalf("ListTopicsRegex(t1, 5$) = %v, %v; want 10 topics", l, err)
	}

	t.Run("every operation", func(t *testing.T) {
		if err := c.Ping(ctx); err != nil {
			t.Fatal(err)
		}
		msgs, err := c.Consume(ctx, "t007", 1, 2)
		if err != nil || len(msgs) != 2 || msgs[0].Offset != 1 || string(msgs[0].Value) != "t007-b" || string(msgs[1].Value) != "t007-a" {
			t.Fatalf("Consume(t007, 1, 2) = %v, %v", msgs, err)
		}
		dst, next, err := c.ConsumeInto(ctx, nil, "t008", 0, 10)
		if err != nil || len(dst) != 4 || next != 4 {
			t.Fatalf("ConsumeInto(t008) = %d messages, next %d, %v", len(dst), next, err)
		}
		info, err := c.TopicInfo(ctx, "t009")
		if err != nil || info.Next != 4 || info.Oldest != 0 {
			t.Fatalf("TopicInfo(t009) = %+v, %v", info, err)
		}
		if off, err := c.OffsetAt(ctx, "t009", time.Now().Add(time.Hour)); err != nil || off != 4 {
			t.Fatalf("OffsetAt(t009, +1h) = %d, %v", off, err)
		}
		if _, err := c.Truncate(ctx, "t010", 2); err != nil {
			t.Fatalf("Truncate: %v", err)
		}
		if _, err := c.TruncateTime(ctx, "t010", time.Now().Add(-time.Hour)); err != nil {
			t.Fatalf("TruncateTime: %v", err)
		}
		if err := c.CreateTopic(ctx, "made"); err != nil {
			t.Fatalf("CreateTopic: %v", err)
		}
		if err := c.CreateTopic(ctx, "made"); !errors.Is(err, client.ErrTopicExists) {
			t.Fatalf("CreateTopic again: %v, want ErrTopicExists", err)
		}
		if err := c.CreateTopic(ctx, "t011"); !errors.Is(err, client.ErrTopicExists) {
			t.Fatalf("CreateTopic of an existing topic: %v, want ErrTopicExists", err)
		}
		if err := c.DeleteTopic(ctx, "made"); err != nil {
			t.Fatalf("DeleteTopic: %v", err)
		}
		if _, err := c.TopicInfo(ctx, "made"); !errors.Is(err, client.ErrTopicNotFound) {
			t.Fatalf("TopicInfo of a deleted topic: %v, want ErrTopicNotFound", err)
		}
		if _, err := c.TopicInfo(ctx, "bad/name"); !errors.Is(err, client.ErrInvalidTopic) {
			t.Fatalf("TopicInfo(bad/name): %v, want ErrInvalidTopic", err)
		}

		p := c.NewProducer("t012")
		f, err := p.Send(ctx, []byte("sent"))
		if err != nil {
			t.Fatal(err)
		}
		if off, err := f.Wait(ctx); err != nil || off != 4 {
			t.Fatalf("Producer: offset %d, %v; want 4", off, err)
		}
		p.Close()
		r, err := c.NewReader("t012", 3)
		if err != nil {
			t.Fatal(err)
		}
		got, err := r.Next(ctx)
		if err != nil || len(got) != 2 || string(got[1].Value) != "sent" {
			t.Fatalf("Reader.Next = %v, %v", got, err)
		}
		r.Close()

		mctx, cancel := context.WithCancel(ctx)
		var seen []int64
		for m, err := range c.Messages(mctx, "t013", 2) {
			if err != nil {
				t.Fatal(err)
			}
			seen = append(seen, m.Offset)
			if len(seen) == 2 {
				if _, err := c.Produce(ctx, "t013", []byte("late")); err != nil {
					t.Fatal(err)
				}
			}
			if len(seen) == 3 {
				cancel()
			}
		}
		cancel()
		if !slices.Equal(seen, []int64{2, 3, 4}) {
			t.Fatalf("Messages(t013, 2) saw %v", seen)
		}
		if st := c.Stats(); st.MessagesAcked < 2*2*n || st.MessagesReceived == 0 {
			t.Fatalf("Stats() = %+v", st)
		}
	})

	t.Run("moved topic is found again", func(t *testing.T) {
		// The client has t020 cached where it is; put it on another
		// server behind the client's back.
		from := where["t020"]
		to := s1.Addr
		if from == s1.Addr {
			to = s2.Addr
		}
		direct := func(addr string) *client.Client {
			d, err := client.Dial(ctx, addr)
			if err != nil {
				t.Fatal(err)
			}
			return d
		}
		a, b := direct(from), direct(to)
		defer a.Close()
		defer b.Close()
		if err := a.DeleteTopic(ctx, "t020"); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Produce(ctx, "t020", []byte("moved")); err != nil {
			t.Fatal(err)
		}
		msgs, err := c.Consume(ctx, "t020", 0, 1)
		if err != nil || len(msgs) != 1 || string(msgs[0].Value) != "moved" {
			t.Fatalf("Consume of a moved topic = %v, %v", msgs, err)
		}
		where["t020"] = to
	})

	t.Run("MoveTopic keeps offsets", func(t *testing.T) {
		// t010 was truncated to 2 above: its copy starts at 2 too.
		from := where["t010"]
		to := s1.Addr
		if from == s1.Addr {
			to = s2.Addr
		}
		dst, err := client.Dial(ctx, to)
		if err != nil {
			t.Fatal(err)
		}
		defer dst.Close()
		before, err := c.TopicInfo(ctx, "t010")
		if err != nil || before.Oldest != 2 {
			t.Fatalf("t010 before the move: %+v, %v", before, err)
		}
		msgs, err := c.Consume(ctx, "t010", 2, 2)
		if err != nil || len(msgs) != 2 {
			t.Fatal(msgs, err)
		}
		at, err := c.OffsetAt(ctx, "t010", msgs[0].Time)
		if err != nil {
			t.Fatal(err)
		}
		res, err := c.MoveTopic(ctx, "t010", dst)
		if err != nil || res.Oldest != 2 || res.Next != 4 {
			t.Fatalf("MoveTopic(t010) = %+v, %v", res, err)
		}
		if slices.Contains(topicsOn(t, ctx, from), "t010") || !slices.Contains(topicsOn(t, ctx, to), "t010") {
			t.Fatalf("t010 not moved from %s to %s", from, to)
		}
		after, err := c.TopicInfo(ctx, "t010")
		if err != nil || after.Oldest != before.Oldest || after.Next != before.Next {
			t.Fatalf("t010 after the move: %+v, %v; before %+v", after, err, before)
		}
		got, err := c.Consume(ctx, "t010", 2, 2)
		if err != nil || len(got) != 2 || got[0].Offset != 2 || string(got[1].Value) != string(msgs[1].Value) || !got[0].Time.Equal(msgs[0].Time) {
			t.Fatalf("t010 read after the move: %v, %v; before %v", got, err, msgs)
		}
		if again, err := c.OffsetAt(ctx, "t010", msgs[0].Time); err != nil || again != at {
			t.Fatalf("OffsetAt after the move: %d, %v; before %d", again, err, at)
		}
		where["t010"] = to
	})

	// One server stops: its topics fail fast naming it, the others'
	// keep working, through this client (locations cached) and through a
	// new one (locations looked up).
	down := s3.Addr
	if err := s3.Close(); err != nil {
		t.Fatal(err)
	}
	fresh, err := client.Dial(ctx, joinAddrs(s1, s2, s3))
	if err != nil {
		t.Fatalf("Dial with one server down: %v", err)
	}
	defer fresh.Close()
	for _, cl := range []*client.Client{c, fresh} {
		checked := 0
		for i := 0; i < n; i += 7 {
			tp := name(i)
			start := time.Now()
			msgs, err := cl.Consume(ctx, tp, 0, 1)
			if where[tp] == down {
				if err == nil || !strings.Contains(err.Error(), down) {
					t.Fatalf("consume %s on the stopped server: %v, want an error naming %s", tp, err, down)
				}
				if d := time.Since(start); d > 6*time.Second {
					t.Fatalf("consume %s on the stopped server took %v to fail", tp, d)
				}
				checked++
				continue
			}
			if err != nil || len(msgs) != 1 {
				t.Fatalf("consume %s on %s with %s down: %v, %v", tp, where[tp], down, msgs, err)
			}
			if _, err := cl.Produce(ctx, tp, []byte("while down")); err != nil {
				t.Fatalf("produce %s with %s down: %v", tp, down, err)
			}
		}
		if checked == 0 {
			t.Fatal("no topic of the stopped server was checked")
		}
	}
	if _, err := fresh.ListTopics(ctx, ""); err == nil || !strings.Contains(err.Error(), down) {
		t.Fatalf("ListTopics with a server down: %v, want an error naming %s", err, down)
	}

	// The stopped server comes back (at a new port) and a fourth joins:
	// every old topic is read at its offsets, and new ones reach the
	// fourth.
	s3b, err := s3.Restart()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s3b.Close() })
	s4 := brokertest.Start(t, 1)
	four, err := client.Dial(ctx, joinAddrs(s1, s2, s3b, s4))
	if err != nil {
		t.Fatal(err)
	}
	defer four.Close()
	for i := range n {
		tp := name(i)
		if tp == "t020" || tp == "t010" {
			continue // moved, truncated
		}
		msgs, err := four.Consume(ctx, tp, 0, 4)
		if err != nil || len(msgs) != 4 || msgs[2].Offset != 2 || string(msgs[2].Value) != tp+"-a" {
			t.Fatalf("%s after a fourth server joined: %v, %v", tp, msgs, err)
		}
	}
	for i := n; i < n+100; i++ {
		if _, err := four.Produce(ctx, name(i), []byte("new")); err != nil {
			t.Fatal(err)
		}
	}
	on4 := topicsOn(t, ctx, s4.Addr)
	if len(on4) == 0 {
		t.Fatal("no new topic reached the fourth server")
	}
	for _, tp := range on4 {
		if tp < name(n) {
			t.Errorf("old topic %s moved to the fourth server", tp)
		}
	}
	t.Logf("the fourth server took %d of 100 new topics", len(on4))
}

// A topic that would be placed on a server that is down fails to be
// created, naming that server, rather than landing elsewhere.
func TestSeveralServersCreateOnDown(t *testing.T) {
	ctx := testCtx(t)
	s1, s2 := brokertest.Start(t, 1), brokertest.Start(t, 1)
	addrs := []string{s1.Addr, s2.Addr}
	down := s2.Addr
	var topic string
	for i := 0; topic == ""; i++ {
		if tp := fmt.Sprintf("x%d", i); client.Place(tp, addrs) == 1 {
			topic = tp
		}
	}
	s2.Close()
	c, err := client.Dial(ctx, strings.Join(addrs, ","), client.WithLocateTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	_, err = c.Produce(ctx, topic, []byte("m"))
	if !errors.Is(err, client.ErrUnavailable) || !strings.Contains(err.Error(), down) {
		t.Fatalf("produce to a topic placed on a stopped server: %v, want ErrUnavailable naming %s", err, down)
	}
	if d := time.Since(start); d > 6*time.Second {
		t.Fatalf("took %v to fail", d)
	}
	var se *client.ServerError
	if !errors.As(err, &se) || se.Addr != down {
		t.Fatalf("error %v carries no *ServerError for %s", err, down)
	}
	p := c.NewProducer(topic)
	if _, err := p.Send(ctx, []byte("m")); !errors.Is(err, client.ErrUnavailable) {
		t.Fatalf("Producer.Send to a topic placed on a stopped server: %v", err)
	}
	p.Close()
	if _, err := client.Dial(ctx, down+","+down+" , "); err == nil {
		t.Fatal("Dial of a stopped server alone succeeded")
	}
}

func TestPlace(t *testing.T) {
	three := []string{"a:1", "b:1", "c:1"}
	four := append(slices.Clone(three), "d:1")
	reversed := []string{"c:1", "b:1", "a:1"}
	moved := 0
	for i := range 10000 {
		tp := fmt.Sprintf("topic-%d", i)
		p3, p4 := three[client.Place(tp, three)], four[client.Place(tp, four)]
		if p4 != p3 {
			if p4 != "d:1" {
				t.Fatalf("%s moved from %s to %s, not to the new server", tp, p3, p4)
			}
			moved++
		}
		if r := reversed[client.Place(tp, reversed)]; r != p3 {
			t.Fatalf("%s placed on %s or %s by the order of the list", tp, p3, r)
		}
	}
	if moved < 2000 || moved > 3000 {
		t.Fatalf("%d of 10000 topics go to a fourth server, want about 2500", moved)
	}
	if client.Place("x", nil) != -1 {
		t.Fatal("Place over no servers is not -1")
	}
}

// Many goroutines on topics the client has not seen: each topic is
// created once, on one server, and every message gets its own offset.
func TestSeveralServersConcurrent(t *testing.T) {
	ctx := testCtx(t)
	s1, s2, s3 := brokertest.Start(t, 1), brokertest.Start(t, 1), brokertest.Start(t, 1)
	c, err := client.Dial(ctx, joinAddrs(s1, s2, s3))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const topics, writers = 10, 8
	errs := make(chan error, topics*writers)
	for i := range topics * writers {
		go func() {
			_, err := c.Produce(ctx, fmt.Sprintf("c%d", i%topics), []byte("m"))
			errs <- err
		}()
	}
	for range topics * writers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	total := 0
	for _, s := range []*brokertest.Server{s1, s2, s3} {
		total += len(topicsOn(t, ctx, s.Addr))
	}
	if total != topics {
		t.Fatalf("the servers hold %d topics, want %d", total, topics)
	}
	for i := range topics {
		if info, err := c.TopicInfo(ctx, fmt.Sprintf("c%d", i)); err != nil || info.Next != writers {
			t.Fatalf("c%d: %+v, %v; want %d messages", i, info, err, writers)
		}
	}
}

// A Messages loop follows its topic to another server, from the next
// offset, once the first says it no longer has it.
func TestSeveralServersMessagesFollowMove(t *testing.T) {
	ctx := testCtx(t)
	s1, s2 := brokertest.Start(t, 1), brokertest.Start(t, 1)
	c, err := client.Dial(ctx, joinAddrs(s1, s2), client.WithRetries(3, 10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	a, err := client.Dial(ctx, s1.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := client.Dial(ctx, s2.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, err := a.Produce(ctx, "f", []byte("0"), []byte("1")); err != nil {
		t.Fatal(err)
	}
	mctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var got []string
	for m, err := range c.Messages(mctx, "f", 0) {
		if err != nil {
			if !errors.Is(err, client.ErrTopicNotFound) {
				t.Fatal(err)
			}
			continue // the loop looks for the topic again
		}
		got = append(got, string(m.Value))
		if len(got) == 2 {
			// Move f: the same offsets on s2, one more message, then
			// gone from s1.
			if _, err := b.Produce(ctx, "f", []byte("0"), []byte("1"), []byte("2")); err != nil {
				t.Fatal(err)
			}
			if err := a.DeleteTopic(ctx, "f"); err != nil {
				t.Fatal(err)
			}
		}
		if len(got) == 3 {
			cancel()
		}
	}
	if !slices.Equal(got, []string{"0", "1", "2"}) {
		t.Fatalf("Messages saw %q, want 0 1 2", got)
	}
}

// Over several servers, a Producer's and a Reader's errors name the
// topic's server once it stops.
func TestSeveralServersStreamErrorsNameServer(t *testing.T) {
	ctx := testCtx(t)
	s1, s2 := brokertest.Start(t, 1), brokertest.Start(t, 1)
	addrs := []string{s1.Addr, s2.Addr}
	var topic string
	for i := 0; topic == ""; i++ {
		if tp := fmt.Sprintf("n%d", i); client.Place(tp, addrs) == 1 {
			topic = tp
		}
	}
	c, err := client.Dial(ctx, strings.Join(addrs, ","), client.WithRetries(1, 10*time.Millisecond), client.WithRequestTimeout(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Produce(ctx, topic, []byte("a")); err != nil {
		t.Fatal(err)
	}
	p := c.NewProducer(topic, client.WithLinger(0))
	defer p.Close()
	r, err := c.NewReader(topic, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if msgs, err := r.Next(ctx); err != nil || len(msgs) != 1 {
		t.Fatalf("first read: %v, %v", msgs, err)
	}
	s2.Close()
	named := func(what string, err error) {
		t.Helper()
		var se *client.ServerError
		if !errors.As(err, &se) || se.Addr != s2.Addr || !strings.Contains(err.Error(), s2.Addr) {
			t.Fatalf("%s with its server stopped: %v, want a *ServerError naming %s", what, err, s2.Addr)
		}
	}
	f, err := p.Send(ctx, []byte("b"))
	if err == nil {
		_, err = f.Wait(ctx)
	}
	named("Producer.Send", err)
	_, err = r.Next(ctx)
	named("Reader.Next", err)
}

// TestSeveralServersOwnerDownNamesAll: a produce to a topic that none of
// the servers that answered has, while its owner and another server are
// down, names both (a replicated topic may be on either) and those that
// answered.
func TestSeveralServersOwnerDownNamesAll(t *testing.T) {
	ctx := testCtx(t)
	srvs := []*brokertest.Server{brokertest.Start(t, 1), brokertest.Start(t, 1), brokertest.Start(t, 1)}
	addrs := []string{srvs[0].Addr, srvs[1].Addr, srvs[2].Addr}
	var topic string
	for i := 0; topic == ""; i++ {
		if tp := fmt.Sprintf("x%d", i); client.Place(tp, addrs) == 1 {
			topic = tp
		}
	}
	srvs[1].Close()
	srvs[2].Close()
	c, err := client.Dial(ctx, strings.Join(addrs, ","), client.WithLocateTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.Produce(ctx, topic, []byte("m"))
	if !errors.Is(err, client.ErrUnavailable) {
		t.Fatalf("produce with its owner down: %v, want ErrUnavailable", err)
	}
	for _, want := range []string{"belongs on " + addrs[1], addrs[1] + ", " + addrs[2], "not on " + addrs[0]} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q should say %q", err, want)
		}
	}
}
