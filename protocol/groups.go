package protocol

import "iter"

// Consumer groups: ops 11 to 15. See doc.go ("Consumer groups") for the
// drawings. A group is a name; per (group, topic) the server keeps a
// committed offset, and at most one member at a time holds a lease on the
// pair.

// Group bounds.
const (
	// MaxGroupLen bounds a group name, in bytes. Group names follow the
	// topic rules: 1-255 bytes of [A-Za-z0-9._-], not "." or "..".
	MaxGroupLen = 255
	// MaxMemberLen bounds a member id, in bytes (any bytes).
	MaxMemberLen = 255
	// MaxLeaseMs bounds the lease a member asks for, in milliseconds (5 min).
	MaxLeaseMs = 300_000
	// DefaultLeaseMs is the lease a request asking for 0 ms gets (10 s).
	DefaultLeaseMs = 10_000
	// NoOffset is the committed offset of a group that has none.
	NoOffset = -1

	listGroupsEntryMinLen = 14 // the smallest entry: a uint16 name length, committed int64, lease uint32
)

// ValidGroup reports whether name is a valid group name: the topic rules
// (1-255 bytes of [A-Za-z0-9._-], not "." or ".."). The error wraps
// ErrInvalidArgument.
func ValidGroup(name string) error { return validGroup(name) }

func validGroup[T string | []byte](name T) error {
	if validTopic(name) != nil {
		return errGroupName
	}
	return nil
}

// CommitFlags modify a commit request.
type CommitFlags uint16

// Commit flags. Other bits are reserved and must be zero.
const (
	// CommitCompare makes the commit conditional: it is applied only if
	// the group's committed offset is Expect (NoOffset: the group has
	// none), else answered with CodeCommitConflict.
	CommitCompare CommitFlags = 1 << 0

	commitFlagsKnown = CommitCompare
)

// CommitRequest sets the committed offset of (Group, Topic): the offset
// the group reads from next.
type CommitRequest struct {
	Offset int64
	Expect int64 // with CommitCompare: the committed offset required
	Flags  CommitFlags
	Topic  []byte
	Group  []byte
	Member []byte // the lease holder committing; empty: none
}

// AppendCommitRequest appends a commit offset request.
func AppendCommitRequest(dst []byte, corrID uint32, req CommitRequest) []byte {
	start := len(dst)
	dst = appendRequestHeader(dst, OpCommitOffset, corrID)
	dst = appendI64(dst, req.Offset)
	dst = appendI64(dst, req.Expect)
	dst = appendU16(dst, uint16(req.Flags))
	dst = appendString(dst, string(req.Topic))
	dst = appendString(dst, string(req.Group))
	dst = appendString(dst, string(req.Member))
	return finishFrame(dst, start)
}

// ParseCommitRequest parses the payload of a commit offset request. Its
// slices borrow from payload.
func ParseCommitRequest(payload []byte) (CommitRequest, error) {
	r := reader{b: payload}
	req := CommitRequest{Offset: r.i64(), Expect: r.i64(), Flags: CommitFlags(r.u16()),
		Topic: r.str(), Group: r.str(), Member: r.str()}
	if err := r.end(); err != nil {
		return CommitRequest{}, err
	}
	if req.Flags&^commitFlagsKnown != 0 {
		return CommitRequest{}, errCommitFlags
	}
	if req.Offset < 0 {
		return CommitRequest{}, errCommitOffset
	}
	if req.Flags&CommitCompare != 0 && req.Expect < NoOffset {
		return CommitRequest{}, errCommitExpect
	}
	return req, checkGroupFields(req.Topic, req.Group, req.Member)
}

func checkGroupFields(topic, group, member []byte) error {
	if err := validTopic(topic); err != nil {
		return err
	}
	if err := validGroup(group); err != nil {
		return err
	}
	if len(member) > MaxMemberLen {
		return errLongMember
	}
	return nil
}

// GroupRequest names a (group, topic) pair: the fetch offset (op 12) and
// delete group (op 15) requests.
type GroupRequest struct {
	Topic []byte
	Group []byte
}

// AppendGroupRequest appends a fetch offset or delete group request (op).
func AppendGroupRequest(dst []byte, op Op, corrID uint32, topic, group string) []byte {
	start := len(dst)
	dst = appendRequestHeader(dst, op, corrID)
	dst = appendString(dst, topic)
	dst = appendString(dst, group)
	return finishFrame(dst, start)
}

// ParseGroupRequest parses the payload of a fetch offset or delete group
// request.
func ParseGroupRequest(payload []byte) (GroupRequest, error) {
	r := reader{b: payload}
	req := GroupRequest{Topic: r.str(), Group: r.str()}
	if err := r.end(); err != nil {
		return GroupRequest{}, err
	}
	return req, checkGroupFields(req.Topic, req.Group, nil)
}

// LeaseAction says what a lease request does.
type LeaseAction uint8

// Lease actions.
const (
	// LeaseTake takes the lease, or renews it when the member holds it.
	LeaseTake LeaseAction = 0
	// LeaseRelease gives the lease up; it is not an error when the member
	// does not hold it.
	LeaseRelease LeaseAction = 1
)

// LeaseRequest takes, renews or releases the lease of Member on (Group,
// Topic).
type LeaseRequest struct {
	Action LeaseAction
	TTLMs  uint32 // lease asked for, in ms; 0: DefaultLeaseMs
	Topic  []byte
	Group  []byte
	Member []byte // 1 to MaxMemberLen bytes
}

// AppendLeaseRequest appends a group lease request.
func AppendLeaseRequest(dst []byte, corrID uint32, req LeaseRequest) []byte {
	start := len(dst)
	dst = appendRequestHeader(dst, OpGroupLease, corrID)
	dst = append(dst, byte(req.Action))
	dst = appendU32(dst, req.TTLMs)
	dst = appendString(dst, string(req.Topic))
	dst = appendString(dst, string(req.Group))
	dst = appendString(dst, string(req.Member))
	return finishFrame(dst, start)
}

// ParseLeaseRequest parses the payload of a group lease request.
func ParseLeaseRequest(payload []byte) (LeaseRequest, error) {
	r := reader{b: payload}
	req := LeaseRequest{Action: LeaseAction(r.u8()), TTLMs: r.u32(), Topic: r.str(), Group: r.str(), Member: r.str()}
	if err := r.end(); err != nil {
		return LeaseRequest{}, err
	}
	if req.Action > LeaseRelease {
		return LeaseRequest{}, errLeaseAction
	}
	if req.TTLMs > MaxLeaseMs {
		return LeaseRequest{}, errLeaseTTL
	}
	if len(req.Member) == 0 {
		return LeaseRequest{}, errNoMember
	}
	return req, checkGroupFields(req.Topic, req.Group, req.Member)
}

// GroupOffsetResponse is the payload of a successful fetch offset or
// group lease response.
type GroupOffsetResponse struct {
	// LeaseMs is the lease the member now holds, in ms: the lease
	// granted by a take, 0 after a release; in a fetch offset response
	// the time left on the lease anyone holds (0: none).
	LeaseMs uint32
	// Committed is the group's committed offset; NoOffset when none.
	Committed int64
	// Start is where the group reads from: Committed raised to the
	// topic's oldest offset (after a truncation past it), or the oldest
	// offset when the group has no commit.
	Start int64
	// Next is the topic's next offset.
	Next int64
}

// AppendGroupOffsetResponse appends a successful fetch offset (op 12) or
// group lease (op 13) response.
func AppendGroupOffsetResponse(dst []byte, op Op, corrID uint32, resp GroupOffsetResponse) []byte {
	start := len(dst)
	dst = appendResponseHeader(dst, op, CodeOK, corrID)
	dst = appendU32(dst, resp.LeaseMs)
	dst = appendI64(dst, resp.Committed)
	dst = appendI64(dst, resp.Start)
	dst = appendI64(dst, resp.Next)
	return finishFrame(dst, start)
}

// ParseGroupOffsetResponse parses the payload of a successful fetch offset
// or group lease response.
func ParseGroupOffsetResponse(payload []byte) (GroupOffsetResponse, error) {
	r := reader{b: payload}
	resp := GroupOffsetResponse{LeaseMs: r.u32(), Committed: r.i64(), Start: r.i64(), Next: r.i64()}
	if err := r.end(); err != nil {
		return GroupOffsetResponse{}, err
	}
	return resp, nil
}

// GroupEntry is one group of a list groups response.
type GroupEntry struct {
	Group     []byte // borrows from the response payload
	Committed int64  // NoOffset when the group holds only a lease
	LeaseMs   uint32 // time left on its lease, ms; 0: none
}

// ListGroupsResponse is the payload of a successful list groups response.
// Its entries were checked by ParseListGroupsResponse and borrow from the
// payload.
type ListGroupsResponse struct {
	Oldest, Next int64 // the topic's offsets
	Count        int
	entries      []byte
}

// Groups iterates over the entries in the order the server sent them
// (ascending group name).
func (r ListGroupsResponse) Groups() iter.Seq[GroupEntry] {
	return func(yield func(GroupEntry) bool) {
		rd := reader{b: r.entries}
		for i := 0; i < r.Count; i++ {
			if !yield(GroupEntry{Group: rd.str(), Committed: rd.i64(), LeaseMs: rd.u32()}) {
				return
			}
		}
	}
}

// AppendListGroupsResponse appends a successful list groups response.
func AppendListGroupsResponse(dst []byte, corrID uint32, oldest, next int64, groups []GroupEntry) []byte {
	start := len(dst)
	dst = appendResponseHeader(dst, OpListGroups, CodeOK, corrID)
	dst = appendI64(dst, oldest)
	dst = appendI64(dst, next)
	dst = appendU32(dst, uint32(len(groups)))
	for _, g := range groups {
		dst = appendString(dst, string(g.Group))
		dst = appendI64(dst, g.Committed)
		dst = appendU32(dst, g.LeaseMs)
	}
	return finishFrame(dst, start)
}

// ParseListGroupsResponse parses the payload of a successful list groups
// response, checking every entry without allocating.
func ParseListGroupsResponse(payload []byte) (ListGroupsResponse, error) {
	r := reader{b: payload}
	resp := ListGroupsResponse{Oldest: r.i64(), Next: r.i64()}
	count := r.u32()
	if r.err != nil {
		return ListGroupsResponse{}, r.err
	}
	entries := r.b
	if uint64(count) > uint64(len(entries)/listGroupsEntryMinLen) {
		return ListGroupsResponse{}, errGroupCount
	}
	for i := uint32(0); i < count; i++ {
		name := r.str()
		r.i64()
		r.u32()
		if r.err == nil && validGroup(name) != nil {
			return ListGroupsResponse{}, wrap(ErrMalformed, "list groups: invalid group name")
		}
	}
	if err := r.end(); err != nil {
		return ListGroupsResponse{}, err
	}
	resp.Count, resp.entries = int(count), entries
	return resp, nil
}

// AppendListGroupsRequest appends a list groups request: the groups of
// topic. Its payload is a topic request's (ParseTopicRequest).
func AppendListGroupsRequest(dst []byte, corrID uint32, topic string) []byte {
	return appendTopicRequest(dst, OpListGroups, corrID, topic)
}
