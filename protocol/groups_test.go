package protocol

import (
	"bytes"
	"errors"
	"testing"
)

// groupGoldens pins one frame of each consumer group op, byte by byte.
func groupGoldens(t testing.TB) []golden {
	return []golden{
		{"commit request", AppendCommitRequest(nil, 42, CommitRequest{Offset: 5, Expect: 3, Flags: CommitCompare,
			Topic: []byte("orders"), Group: []byte("g1"), Member: []byte("m")}),
			"29000000 01 0b 0000 2a000000 0500000000000000 0300000000000000 0100 " + goldenOrders + " 0200 6731 0100 6d", false, OpCommitOffset},
		{"fetch offset request", AppendGroupRequest(nil, OpFetchOffset, 42, "orders", "g1"),
			"14000000 01 0c 0000 2a000000 " + goldenOrders + " 0200 6731", false, OpFetchOffset},
		{"lease request", AppendLeaseRequest(nil, 42, LeaseRequest{Action: LeaseTake, TTLMs: 10000,
			Topic: []byte("orders"), Group: []byte("g1"), Member: []byte("m")}),
			"1c000000 01 0d 0000 2a000000 00 10270000 " + goldenOrders + " 0200 6731 0100 6d", false, OpGroupLease},
		{"lease response", AppendGroupOffsetResponse(nil, OpGroupLease, 42, GroupOffsetResponse{LeaseMs: 10000, Committed: NoOffset, Start: 0, Next: 12345}),
			"24000000 01 0d 0000 2a000000 10270000 ffffffffffffffff 0000000000000000 3930000000000000", true, OpGroupLease},
		{"list groups request", AppendListGroupsRequest(nil, 42, "orders"),
			"10000000 01 0e 0000 2a000000 " + goldenOrders, false, OpListGroups},
		{"list groups response", AppendListGroupsResponse(nil, 42, 0, 12345, []GroupEntry{{Group: []byte("g1"), Committed: 5}}),
			"2c000000 01 0e 0000 2a000000 0000000000000000 3930000000000000 01000000 0200 6731 0500000000000000 00000000", true, OpListGroups},
		{"delete group request", AppendGroupRequest(nil, OpDeleteGroup, 42, "orders", "g1"),
			"14000000 01 0f 0000 2a000000 " + goldenOrders + " 0200 6731", false, OpDeleteGroup},
		{"group busy response", AppendErrorResponse(nil, OpGroupLease, 42, CodeGroupBusy, "busy"),
			"0e000000 01 0d 1400 2a000000 0400 62757379", true, OpGroupLease},
	}
}

func TestGroupGoldenFrames(t *testing.T) {
	for _, g := range groupGoldens(t) {
		if want := unhex(t, g.want); !bytes.Equal(g.frame, want) {
			t.Errorf("%s:\n got %x\nwant %x", g.name, g.frame, want)
		}
		if g.resp {
			h, p, err := ParseResponseHeader(g.frame)
			if err != nil || h.Op != g.op || h.CorrID != 42 {
				t.Fatalf("%s: header %+v, %v", g.name, h, err)
			}
			if h.Code != CodeOK {
				continue
			}
			if err := parseGroupResponse(g.op, p); err != nil {
				t.Errorf("%s: %v", g.name, err)
			}
			continue
		}
		h, p, err := ParseRequestHeader(g.frame)
		if err != nil || h.Op != g.op || h.CorrID != 42 {
			t.Fatalf("%s: header %+v, %v", g.name, h, err)
		}
		if again, err := reencodeGroupRequest(g.op, p); err != nil || !bytes.Equal(again, g.frame) {
			t.Errorf("%s: parse and encode again: %x, %v", g.name, again, err)
		}
	}
}

func TestGroupCodesPinned(t *testing.T) {
	if CodeGroupBusy != 20 || CodeCommitConflict != 21 || OpCommitOffset != 11 || OpFetchOffset != 12 ||
		OpGroupLease != 13 || OpListGroups != 14 || OpDeleteGroup != 15 {
		t.Fatal("a group op or code changed number")
	}
	for op := OpCommitOffset; op <= OpDeleteGroup; op++ {
		if !op.Valid() || op.String() == "unknown op" {
			t.Errorf("op %d", op)
		}
	}
	if CodeOf(&Error{Code: CodeGroupBusy}) != CodeGroupBusy || CodeGroupBusy.String() != "group busy" {
		t.Error("group busy")
	}
}

// TestGroupRequestsRefused: each bad field maps to its code.
func TestGroupRequestsRefused(t *testing.T) {
	long := string(make([]byte, 256))
	commit := func(c CommitRequest) error {
		_, p, _ := ParseRequestHeader(AppendCommitRequest(nil, 1, c))
		_, err := ParseCommitRequest(p)
		return err
	}
	ok := CommitRequest{Offset: 1, Topic: []byte("t"), Group: []byte("g")}
	cases := []struct {
		name string
		err  error
		want error
	}{
		{"commit ok", commit(ok), nil},
		{"negative offset", commit(CommitRequest{Offset: -1, Topic: []byte("t"), Group: []byte("g")}), ErrInvalidArgument},
		{"expect below -1", commit(CommitRequest{Offset: 1, Expect: -2, Flags: CommitCompare, Topic: []byte("t"), Group: []byte("g")}), ErrInvalidArgument},
		{"unknown flags", commit(CommitRequest{Offset: 1, Flags: 2, Topic: []byte("t"), Group: []byte("g")}), ErrMalformed},
		{"bad group", commit(CommitRequest{Offset: 1, Topic: []byte("t"), Group: []byte("..")}), ErrInvalidArgument},
		{"empty group", commit(CommitRequest{Offset: 1, Topic: []byte("t")}), ErrInvalidArgument},
		{"slash in group", commit(CommitRequest{Offset: 1, Topic: []byte("t"), Group: []byte("a/b")}), ErrInvalidArgument},
		{"bad topic", commit(CommitRequest{Offset: 1, Topic: []byte("a/b"), Group: []byte("g")}), ErrInvalidTopic},
		{"long member", commit(CommitRequest{Offset: 1, Topic: []byte("t"), Group: []byte("g"), Member: []byte(long)}), ErrInvalidArgument},
	}
	lease := func(l LeaseRequest) error {
		_, p, _ := ParseRequestHeader(AppendLeaseRequest(nil, 1, l))
		_, err := ParseLeaseRequest(p)
		return err
	}
	cases = append(cases, []struct {
		name string
		err  error
		want error
	}{
		{"lease ok", lease(LeaseRequest{Topic: []byte("t"), Group: []byte("g"), Member: []byte("m")}), nil},
		{"lease without member", lease(LeaseRequest{Topic: []byte("t"), Group: []byte("g")}), ErrInvalidArgument},
		{"lease too long", lease(LeaseRequest{TTLMs: MaxLeaseMs + 1, Topic: []byte("t"), Group: []byte("g"), Member: []byte("m")}), ErrInvalidArgument},
		{"unknown action", lease(LeaseRequest{Action: 2, Topic: []byte("t"), Group: []byte("g"), Member: []byte("m")}), ErrMalformed},
	}...)
	for _, c := range cases {
		if c.want == nil && c.err != nil || c.want != nil && !errors.Is(c.err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, c.err, c.want)
		}
	}
	// Cut short anywhere: malformed, never a panic.
	for _, g := range groupGoldens(t) {
		for i := HeaderSize; i < len(g.frame); i++ {
			p := g.frame[HeaderSize:i]
			var err error
			if g.resp {
				err = parseGroupResponse(g.op, p)
			} else {
				_, err = reencodeGroupRequest(g.op, p)
			}
			if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrInvalidArgument) && !errors.Is(err, ErrInvalidTopic) {
				t.Errorf("%s cut to %d bytes: %v", g.name, i, err)
			}
		}
	}
	// A count larger than the payload can hold is refused before any loop.
	huge := AppendListGroupsResponse(nil, 1, 0, 0, nil)
	huge[HeaderSize+16] = 0xff
	if err := parseGroupResponse(OpListGroups, huge[HeaderSize:]); !errors.Is(err, ErrMalformed) {
		t.Errorf("huge count: %v", err)
	}
}

func parseGroupResponse(op Op, p []byte) error {
	switch op {
	case OpFetchOffset, OpGroupLease:
		_, err := ParseGroupOffsetResponse(p)
		return err
	case OpListGroups:
		r, err := ParseListGroupsResponse(p)
		if err == nil {
			n := 0
			for range r.Groups() {
				n++
			}
			if n != r.Count {
				return errors.New("count mismatch")
			}
		}
		return err
	}
	return ParseEmptyResponse(p)
}

// reencodeGroupRequest parses a group request payload of op and encodes
// it again as a frame with correlation id 42.
func reencodeGroupRequest(op Op, p []byte) ([]byte, error) {
	switch op {
	case OpCommitOffset:
		r, err := ParseCommitRequest(p)
		if err != nil {
			return nil, err
		}
		return AppendCommitRequest(nil, 42, r), nil
	case OpFetchOffset, OpDeleteGroup:
		r, err := ParseGroupRequest(p)
		if err != nil {
			return nil, err
		}
		return AppendGroupRequest(nil, op, 42, string(r.Topic), string(r.Group)), nil
	case OpGroupLease:
		r, err := ParseLeaseRequest(p)
		if err != nil {
			return nil, err
		}
		return AppendLeaseRequest(nil, 42, r), nil
	case OpListGroups:
		r, err := ParseTopicRequest(p)
		if err != nil {
			return nil, err
		}
		return AppendListGroupsRequest(nil, 42, string(r.Topic)), nil
	}
	return nil, ErrUnknownOp
}

// FuzzParseGroupRequest checks the group request decoders on arbitrary
// payloads: no panic, a refusal maps to a specific code, and what is
// accepted encodes back to the same bytes.
func FuzzParseGroupRequest(f *testing.F) {
	for _, g := range groupGoldens(f) {
		if !g.resp {
			f.Add(uint8(g.op), g.frame[HeaderSize:])
		}
	}
	f.Fuzz(func(t *testing.T, op uint8, p []byte) {
		o := OpCommitOffset + Op(op%5)
		again, err := reencodeGroupRequest(o, p)
		if err != nil {
			if c := CodeOf(err); c != CodeMalformedRequest && c != CodeInvalidArgument && c != CodeInvalidTopic {
				t.Fatalf("%s: %v maps to %s", o, err, c)
			}
			return
		}
		if !bytes.Equal(again[HeaderSize:], p) {
			t.Fatalf("%s: accepted %x, encodes back to %x", o, p, again[HeaderSize:])
		}
	})
}

// FuzzParseGroupResponse checks the group response decoders.
func FuzzParseGroupResponse(f *testing.F) {
	for _, g := range groupGoldens(f) {
		if g.resp && g.frame[frameCodeOff] == 0 {
			f.Add(uint8(g.op), g.frame[HeaderSize:])
		}
	}
	f.Fuzz(func(t *testing.T, op uint8, p []byte) {
		o := OpCommitOffset + Op(op%5)
		if err := parseGroupResponse(o, p); err != nil && CodeOf(err) != CodeMalformedRequest {
			t.Fatalf("%s: %v", o, err)
		}
	})
}
