package broker

import (
	"time"

	"github.com/haraqa/haraqa/broker/service"
	"github.com/haraqa/haraqa/protocol"
)

// This file: the consumer group ops (11-15), translated into the
// service's group calls. Every group op runs on the connection's
// goroutine, off the loop: a commit or a group deletion writes a file per
// volume while it holds the topic's group table, which a fetch, lease or
// list takes too.

// groupReq is a parsed group request: copies that outlive the frame.
type groupReq struct {
	group, member string
	commit        service.Commit
	action        protocol.LeaseAction
	ttl           time.Duration
}

func isGroupOp(op protocol.Op) bool {
	return op >= protocol.OpCommitOffset && op <= protocol.OpDeleteGroup
}

func (b *Broker) groupJob(h protocol.RequestHeader, payload []byte) (*job, error) {
	j := &job{op: h.Op, corrID: h.CorrID, grp: &groupReq{}}
	switch h.Op {
	case protocol.OpCommitOffset:
		req, err := protocol.ParseCommitRequest(payload)
		if err != nil {
			return nil, err
		}
		j.topic, j.grp.group = string(req.Topic), string(req.Group)
		j.grp.commit = service.Commit{Offset: req.Offset, Expect: req.Expect,
			Compare: req.Flags&protocol.CommitCompare != 0, Member: string(req.Member)}
	case protocol.OpFetchOffset, protocol.OpDeleteGroup:
		req, err := protocol.ParseGroupRequest(payload)
		if err != nil {
			return nil, err
		}
		j.topic, j.grp.group = string(req.Topic), string(req.Group)
	case protocol.OpGroupLease:
		req, err := protocol.ParseLeaseRequest(payload)
		if err != nil {
			return nil, err
		}
		j.topic, j.grp.group, j.grp.member = string(req.Topic), string(req.Group), string(req.Member)
		j.grp.action, j.grp.ttl = req.Action, time.Duration(req.TTLMs)*time.Millisecond
	case protocol.OpListGroups:
		req, err := protocol.ParseTopicRequest(payload)
		if err != nil {
			return nil, err
		}
		j.topic = string(req.Topic)
	}
	return j, nil
}

// runGroupJob runs a group job and appends its response to dst.
func (b *Broker) runGroupJob(dst []byte, j *job) []byte {
	g := j.grp
	var err error
	switch j.op {
	case protocol.OpCommitOffset:
		err = b.svc.CommitOffset(j.caller, j.topic, g.group, g.commit)
	case protocol.OpDeleteGroup:
		err = b.svc.DeleteGroup(j.caller, j.topic, g.group)
	case protocol.OpFetchOffset, protocol.OpGroupLease:
		var o service.GroupOffset
		lease := uint32(0)
		switch {
		case j.op == protocol.OpFetchOffset:
			o, err = b.svc.FetchOffset(j.caller, j.topic, g.group)
			lease = leaseMs(o.LeaseLeft)
		case g.action == protocol.LeaseTake:
			o, err = b.svc.Lease(j.caller, j.topic, g.group, g.member, g.ttl)
			lease = leaseMs(o.LeaseLeft)
		default:
			o, err = b.svc.ReleaseLease(j.caller, j.topic, g.group, g.member)
		}
		if err == nil {
			return protocol.AppendGroupOffsetResponse(dst, j.op, j.corrID, protocol.GroupOffsetResponse{
				LeaseMs: lease, Committed: o.Committed, Start: o.Start, Next: o.Next})
		}
	case protocol.OpListGroups:
		var info service.TopicInfo
		var gs []service.GroupOffset
		if info, gs, err = b.svc.ListGroups(j.caller, j.topic); err == nil {
			entries := make([]protocol.GroupEntry, len(gs))
			for i, o := range gs {
				entries[i] = protocol.GroupEntry{Group: []byte(o.Group), Committed: o.Committed, LeaseMs: leaseMs(o.LeaseLeft)}
			}
			return protocol.AppendListGroupsResponse(dst, j.corrID, info.Oldest, info.Next, entries)
		}
	}
	if err != nil {
		return b.appendError(dst, j.op, j.corrID, err)
	}
	return protocol.AppendEmptyResponse(dst, j.op, j.corrID)
}

// leaseMs is d in whole milliseconds for the wire, at least 1 while any
// of the lease is left.
func leaseMs(d time.Duration) uint32 {
	if d <= 0 {
		return 0
	}
	return uint32(max(1, min(d.Milliseconds(), protocol.MaxLeaseMs)))
}
