package httpapi

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/valyala/bytebufferpool"

	"github.com/haraqa/haraqa/broker"
	"github.com/haraqa/haraqa/broker/service"
	"github.com/haraqa/haraqa/protocol"
)

// This file: the REST routes on topics, each a translation of an HTTP
// request into the service's calls (package service) and of their answer
// back. The rules (rights, names, bounds, error codes) are the service's,
// shared with the binary port; what is here is HTTP's: parameters,
// headers, bodies and statuses.

// call is a request on /topics/{topic}, once it may be served: the
// service, the request's Caller, the topic and the broker whose memory
// budget its body and response count against.
type call struct {
	svc    *service.Service
	caller service.Caller
	topic  string
	budget *broker.Broker
}

// topicHandler serves a route on /topics/{topic}.
type topicHandler func(w http.ResponseWriter, r *http.Request, c call)

// onTopic answers 503 while recovering, 400 for an invalid name, 401 or
// 403 when the token (Config.Auth) does not allow op on the topic, 307 to
// the peer that has a topic this server lacks (Config.Peers), and
// otherwise calls h.
func (a *API) onTopic(op protocol.Op, h topicHandler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		st := a.state.Load()
		if st == nil {
			a.fail(w, ErrNotReady)
			return
		}
		name := r.PathValue("topic")
		if err := service.ValidTopic(name); err != nil {
			a.failOn(w, r, err)
			return
		}
		caller, ok := a.authorize(w, r, st.svc, op, name)
		if !ok || a.elsewhere(w, r, st.svc, name) {
			return
		}
		h(w, r, call{svc: st.svc, caller: caller, topic: name, budget: st.broker})
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// ready returns the state and r's Caller, or answers (503 while
// recovering, 401, 429) and returns ok false.
func (a *API) ready(w http.ResponseWriter, r *http.Request) (st *state, c service.Caller, ok bool) {
	if st = a.state.Load(); st == nil {
		a.fail(w, ErrNotReady)
		return nil, c, false
	}
	if c, ok = a.authenticate(w, r, st.svc); !ok {
		return nil, c, false
	}
	return st, c, true
}

// GET /topics[?prefix=P][&regex=R]
func (a *API) listTopics(w http.ResponseWriter, r *http.Request) {
	st, c, ok := a.ready(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	// A regex runs on the service's filter workers: bounded, compiled once.
	names, err := st.svc.ListTopics(c, q.Get("prefix"), q.Get("regex"))
	if err != nil {
		a.failOn(w, r, err) // a bad regex is 400, full filter workers 429, by their codes
		return
	}
	// As the original server: CSV unless the client asks for JSON, HTML or
	// (ours) plain text, one name a line. Names hold no comma.
	accept := r.Header.Get("Accept")
	var b strings.Builder
	switch {
	case strings.Contains(accept, "application/json"):
		writeJSON(w, http.StatusOK, struct {
			Topics []string `json:"topics"`
		}{append([]string{}, names...)})
		return
	case strings.Contains(accept, "text/html"):
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		b.WriteString("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>haraqa topics</title></head><body><ul>\n")
		for _, n := range names {
			b.WriteString("<li>" + html.EscapeString(n) + "</li>\n")
		}
		b.WriteString("</ul></body></html>\n")
	case strings.Contains(accept, "text/plain"):
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		for _, n := range names {
			b.WriteString(n)
			b.WriteByte('\n')
		}
	default:
		w.Header().Set("Content-Type", "text/csv; charset=utf-8")
		b.WriteString(strings.Join(names, ","))
	}
	_, _ = io.WriteString(w, b.String())
}

// create serves PUT /topics/{topic} (201) and remove DELETE
// /topics/{topic} (204). Both are idempotent, as the original server's:
// creating a topic that exists is 201 again, deleting a missing one 204.
// PUT /topics/{topic}?replicas=N creates the topic on N replicas (201),
// or changes an existing one's replication factor (202: recorded, the
// move goes on), as op 22 does.
func (a *API) create(w http.ResponseWriter, r *http.Request, c call) {
	if q := r.URL.Query().Get("replicas"); q != "" {
		n, err := strconv.Atoi(q)
		if err != nil || n < 1 || n > protocol.MaxTopicReplicas {
			a.fail(w, fmt.Errorf("%w: replicas %q: want 1 to %d", protocol.ErrInvalidArgument, q, protocol.MaxTopicReplicas))
			return
		}
		created, err := c.svc.SetReplicas(c.caller, c.topic, n)
		switch {
		case err != nil:
			a.fail(w, err)
		case created:
			w.WriteHeader(http.StatusCreated)
		default:
			w.WriteHeader(http.StatusAccepted)
		}
		return
	}
	if err := c.svc.CreateTopic(c.caller, c.topic); err != nil && service.Code(err) != protocol.CodeTopicExists {
		a.fail(w, err)
		return
	}
	w.WriteHeader(http.StatusCreated)
}

func (a *API) remove(w http.ResponseWriter, _ *http.Request, c call) {
	if err := c.svc.DeleteTopic(c.caller, c.topic); err != nil && service.Code(err) != protocol.CodeTopicNotFound {
		a.fail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

type topicInfo struct {
	Topic    string `json:"topic"`
	Oldest   int64  `json:"oldest"`
	Next     int64  `json:"next"`
	Bytes    int64  `json:"bytes"`
	Segments int    `json:"segments"`
	// The original server's names for oldest and next, which its client reads.
	MinOffset int64 `json:"minOffset"`
	MaxOffset int64 `json:"maxOffset"`
}

// GET /topics/{topic}/info
func (a *API) topicInfo(w http.ResponseWriter, _ *http.Request, c call) {
	info, err := c.svc.Info(c.caller, c.topic)
	a.writeInfo(w, c.topic, info, err)
}

// writeInfo answers with topic's info, unless err.
func (a *API) writeInfo(w http.ResponseWriter, topic string, info service.TopicInfo, err error) {
	if err != nil {
		a.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, topicInfo{topic, info.Oldest, info.Next, info.Bytes, info.Segments, info.Oldest, info.Next})
}

// minTime and maxTime bound the times a message can carry: its append
// time is stored in nanoseconds since 1970 in an int64.
var (
	minTime = time.Unix(0, math.MinInt64).UTC()
	maxTime = time.Unix(0, math.MaxInt64).UTC()
)

// maxPatchBody bounds a PATCH's JSON body.
const maxPatchBody = 4 << 10

// PATCH /topics/{topic}?before=OFFSET|RFC3339, or with the original
// server's JSON body {"truncate":OFFSET} or {"before":"RFC3339"}.
func (a *API) truncate(w http.ResponseWriter, r *http.Request, c call) {
	before := r.URL.Query().Get("before")
	if before == "" && r.ContentLength != 0 {
		var err error
		if before, err = patchBody(r); err != nil {
			a.failOn(w, r, err)
			return
		}
	}
	var info service.TopicInfo
	var err error
	if off, perr := strconv.ParseInt(before, 10, 64); perr == nil {
		info, err = c.svc.Truncate(c.caller, c.topic, off) // the service's bounds: [0, next]
	} else if t, terr := time.Parse(time.RFC3339Nano, before); terr == nil {
		if err = timeInRange("before", before, t); err != nil {
			a.failOn(w, r, err)
			return
		}
		info, err = c.svc.TruncateTime(c.caller, c.topic, t)
	} else {
		a.fail(w, badRequest("before must be an offset or an RFC 3339 time, got %q", before))
		return
	}
	if err != nil {
		a.failOn(w, r, err) // a replicated topic's follower: 307 to its leader
		return
	}
	a.writeInfo(w, c.topic, info, nil)
}

// patchBody returns the before of the original server's PATCH body.
func patchBody(r *http.Request) (string, error) {
	var body struct {
		Truncate *int64 `json:"truncate"`
		Before   string `json:"before"`
	}
	dec := json.NewDecoder(io.LimitReader(r.Body, maxPatchBody))
	if derr := dec.Decode(&body); derr != nil || (body.Truncate == nil) == (body.Before == "") {
		return "", badRequestAs(sentinelJSON, `the body must be {"truncate":OFFSET} or {"before":"RFC3339 time"}`)
	}
	if body.Truncate != nil {
		return strconv.FormatInt(*body.Truncate, 10), nil
	}
	return body.Before, nil
}

// parseSizes parses an X-Sizes header: message lengths joined by ':' that
// add up to total, or, for a body of unknown length (total < 0), to at
// most limit bytes. It returns the lengths and their sum.
func parseSizes(h string, total, limit int64) ([]int, int64, error) {
	if h == "" {
		return nil, 0, badRequestAs(sentinelSizes, "X-Sizes header is required: the message lengths joined by ':'")
	}
	bound := total
	if total < 0 {
		bound = limit
	}
	sizes := make([]int, 0, strings.Count(h, ":")+1)
	var sum int64
	for f := range strings.SplitSeq(h, ":") {
		n, err := strconv.Atoi(f)
		if err != nil || n < 0 || int64(n) > bound {
			if err == nil && n >= 0 && total < 0 {
				return nil, 0, fmt.Errorf("%w: X-Sizes add up to more than the limit of %d bytes", ErrTooLarge, limit)
			}
			return nil, 0, badRequestAs(sentinelSizes, "X-Sizes: %q is not a message length", f)
		}
		sum += int64(n)
		if sum > bound {
			break
		}
		sizes = append(sizes, n)
	}
	switch {
	case total < 0 && sum > limit:
		return nil, 0, fmt.Errorf("%w: X-Sizes add up to more than the limit of %d bytes", ErrTooLarge, limit)
	case total >= 0 && sum != total:
		return nil, 0, badRequestAs(sentinelSizes, "X-Sizes add up to %d bytes or more, the body has %d", sum, total)
	}
	return sizes, sum, nil
}

// POST /topics/{topic}, X-Sizes: 3:5:1. The batch is laid out from
// X-Sizes and reserved against the memory budget before the body is read;
// each message is then read straight into its place in it, so that the
// body is held once.
func (a *API) produce(w http.ResponseWriter, r *http.Request, c call) {
	res := reservation{ctx: r.Context(), hb: a.budget, b: c.budget}
	defer res.release()
	batch := bytebufferpool.Get()
	defer putBuffer(batch)
	count, err := a.readBatch(w, r, batch, &res)
	if err != nil {
		a.failOn(w, r, err)
		return
	}
	base, err := c.svc.Produce(c.caller, c.topic, service.Produce{Batch: batch.B, Expect: -1})
	if errors.Is(err, protocol.ErrBatchTooLarge) {
		err = fmt.Errorf("%w: batch too large: the messages with their framing exceed the server's frame limit", ErrTooLarge)
	}
	if err != nil {
		a.failOn(w, r, err)
		return
	}
	w.Header().Set("X-Id", strconv.FormatInt(base, 10))
	writeJSON(w, http.StatusOK, struct {
		Offset int64 `json:"offset"`
		Count  int   `json:"count"`
	}{base, count})
}

// readBatch reads r's body, within Config.MaxBodyBytes, into batch as an
// uncompressed batch of the messages X-Sizes delimits, and returns their
// count. The batch's size is reserved in res before anything is read.
func (a *API) readBatch(w http.ResponseWriter, r *http.Request, batch *bytebufferpool.ByteBuffer, res *reservation) (int, error) {
	if r.ContentLength > a.cfg.MaxBodyBytes {
		return 0, fmt.Errorf("%w: %d bytes, the limit is %d", ErrTooLarge, r.ContentLength, a.cfg.MaxBodyBytes)
	}
	sizes, sum, err := parseSizes(r.Header.Get("X-Sizes"), r.ContentLength, a.cfg.MaxBodyBytes)
	if err != nil {
		return 0, err
	}
	size := int64(protocol.MinBatchHeaderSize) + sum
	for _, n := range sizes {
		size += int64(uvarintLen(n))
	}
	if err := res.grow(size); err != nil {
		return 0, err
	}
	b := slices.Grow(batch.B[:0], int(size))[:size]
	rd := http.MaxBytesReader(w, r.Body, a.cfg.MaxBodyBytes)
	p, got := protocol.MinBatchHeaderSize, int64(0)
	for _, n := range sizes {
		p += binary.PutUvarint(b[p:], uint64(n))
		k, err := io.ReadFull(rd, b[p:p+n])
		got += int64(k)
		if err != nil {
			return 0, bodyErr(err, sum, got)
		}
		p += n
	}
	var one [1]byte
	if k, err := io.ReadFull(rd, one[:]); k > 0 {
		return 0, badRequestAs(sentinelSizes, "X-Sizes add up to %d bytes, the body has more", sum)
	} else if err != io.EOF {
		return 0, bodyErr(err, sum, got)
	}
	protocol.SealBatch(b, protocol.CodecNone, len(sizes), len(b)-protocol.MinBatchHeaderSize)
	batch.B = b
	return len(sizes), nil
}

// bodyErr is the error of a body whose read failed with err after got of
// the sum bytes X-Sizes announced.
func bodyErr(err error, sum, got int64) error {
	if mbe := (*http.MaxBytesError)(nil); errors.As(err, &mbe) {
		return fmt.Errorf("%w: the limit is %d bytes", ErrTooLarge, mbe.Limit)
	}
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return badRequestAs(sentinelSizes, "X-Sizes add up to %d bytes, the body has %d", sum, got)
	}
	return badRequest("reading the body: %v", err)
}

// uvarintLen is the length of n as a uvarint, a message's length prefix.
func uvarintLen(n int) int {
	k := 1
	for ; n >= 0x80; n >>= 7 {
		k++
	}
	return k
}
