package httpapi

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/valyala/bytebufferpool"

	"github.com/haraqa/haraqa/broker/service"
	"github.com/haraqa/haraqa/protocol"
)

// This file: GET /topics/{topic}, the consume, translated into the
// service's Read (and Watch, for a wait), with a consumer group its
// FetchOffset and CommitOffset; the stored batches are decoded into the
// original's body of messages and X-Sizes.

// param returns the query parameter key, or else the header.
func param(r *http.Request, key, header string) string {
	if v := r.URL.Query().Get(key); v != "" {
		return v
	}
	return r.Header.Get(header)
}

// consumeReq is a consume's parameters, parsed.
type consumeReq struct {
	id        int64 // offset to read from; negative counts back from the end
	group     string
	grouped   bool  // read from group's committed offset and commit past the response
	committed int64 // the group's committed offset, when grouped
	limit     int
	wait      time.Duration
}

// GET /topics/{topic}?id=OFFSET&limit=N&wait=D, or ?time=RFC3339 instead
// of id: from the first message appended at or after that time; with
// X-Consumer-Group: G and neither (or a negative id), from G's committed offset.
func (a *API) consume(w http.ResponseWriter, r *http.Request, c call) {
	q, err := a.consumeParams(r, c)
	if err != nil {
		a.failOn(w, r, err)
		return
	}
	res, err := a.read(r, c, q)
	if err != nil {
		if service.Code(err) == protocol.CodeOffsetOutOfRange {
			if info, ierr := c.svc.Info(c.caller, c.topic); ierr == nil {
				if q.id > info.Next {
					// Past the end: nothing there yet, as the original
					// server answers (its client polls on "no content").
					noContent(w, q.id)
					return
				}
				w.Header().Set("X-Oldest", strconv.FormatInt(info.Oldest, 10))
			}
		}
		a.failOn(w, r, err)
		return
	}
	defer res.Release()
	if res.Batches == 0 {
		noContent(w, res.Offset)
		return
	}
	// The batches read and the bodies decoded count against the memory
	// budget until the response is written; the response is written from
	// them, a staging buffer at a time, never built whole.
	held := reservation{ctx: r.Context(), hb: a.budget, b: c.budget}
	defer held.release()
	raw := bytebufferpool.Get()
	defer putBuffer(raw)
	var resp consumeResp
	err = a.messages(c.svc, c.caller, raw, res, q.limit, &held, &resp)
	if err == nil && q.grouped {
		err = a.commitRead(w, c, q, res.Offset, resp.sizes)
	}
	if err != nil {
		a.failOn(w, r, err)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("X-Id", strconv.FormatInt(res.Offset, 10))
	h.Set("X-Sizes", resp.sizes)
	h.Set("Content-Length", strconv.FormatInt(resp.n, 10))
	writeMessages(w, resp.msgs)
}

// consumeParams parses a consume's offset (id, or time), limit and wait;
// with a consumer group and no offset (or a negative one), the offset is
// the group's committed one.
func (a *API) consumeParams(r *http.Request, c call) (consumeReq, error) {
	q := consumeReq{committed: service.NoOffset, limit: a.cfg.DefaultLimit}
	idParam, at := param(r, "id", "X-Id"), r.URL.Query().Get("time")
	var err error
	if idParam != "" {
		if q.id, err = strconv.ParseInt(idParam, 10, 64); err != nil {
			return q, badRequestAs(sentinelID, "id must be an offset, got %q", idParam)
		}
	}
	if at != "" {
		if idParam != "" {
			return q, badRequest("give id or time, not both")
		}
		t, err := parseTime("time", at)
		if err != nil {
			return q, err
		}
		if q.id, err = c.svc.OffsetAt(c.caller, c.topic, t); err != nil {
			return q, err
		}
	}
	q.group = param(r, "group", "X-Consumer-Group")
	q.grouped = q.group != "" && ((idParam == "" && at == "") || q.id < 0)
	if q.grouped {
		o, err := c.svc.FetchUnleased(c.caller, c.topic, q.group)
		if err != nil {
			return q, err
		}
		q.id, q.committed = o.Start, o.Committed
	}
	if v := param(r, "limit", "X-Limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < -1 || n == 0 {
			return q, badRequestAs(sentinelLimit, "limit must be a positive count or -1, got %q", v)
		}
		q.limit = n
	}
	if q.limit <= 0 || q.limit > a.cfg.MaxMessages {
		q.limit = a.cfg.MaxMessages
	}
	if v := r.URL.Query().Get("wait"); v != "" {
		if q.wait, err = time.ParseDuration(v); err != nil || q.wait < 0 {
			return q, badRequest("wait must be a duration such as 500ms or 5s, got %q", v)
		}
		q.wait = min(q.wait, a.cfg.MaxWait)
	}
	return q, nil
}

// parseTime parses the RFC 3339 time v of the parameter name, within the
// times a message can carry.
func parseTime(name, v string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return t, badRequest("%s must be an RFC 3339 time such as 2026-12-01T09:00:00Z, got %q", name, v)
	}
	return t, timeInRange(name, v, t)
}

// timeInRange returns nil if t, the parameter name's value v, is within
// the times a message can carry.
func timeInRange(name, v string, t time.Time) error {
	if t.Before(minTime) || t.After(maxTime) {
		return badRequest("%s %q is out of range: times from %s to %s can be stored", name, v, minTime.Format(time.RFC3339), maxTime.Format(time.RFC3339))
	}
	return nil
}

// commitRead commits the group of q past the messages of a response from
// offset with sizes. Committed before the body is sent: a response lost on
// its way is not read again by the group (at-most-once over HTTP). The
// commit is conditional on the offset read, so two requests of the group
// at once do not both get the same messages: the second gets 409.
func (a *API) commitRead(w http.ResponseWriter, c call, q consumeReq, offset int64, sizes string) error {
	next := offset
	if sizes != "" {
		next += int64(strings.Count(sizes, ":") + 1)
	}
	if err := c.svc.CommitOffset(c.caller, c.topic, q.group, service.Commit{Offset: next, Compare: true, Expect: q.committed}); err != nil {
		return err
	}
	w.Header().Set("X-Committed", strconv.FormatInt(next, 10))
	return nil
}

// noContent answers a consume that found nothing at id: 204 with the
// original client's "no content".
func noContent(w http.ResponseWriter, id int64) {
	w.Header().Set("X-Id", strconv.FormatInt(id, 10))
	w.Header().Set("X-Errors", sentinelNoContent)
	w.WriteHeader(http.StatusNoContent)
}

// read reads from q.id, waiting up to q.wait for a first message.
func (a *API) read(r *http.Request, c call, q consumeReq) (*service.ReadResult, error) {
	res, err := c.svc.Read(c.caller, c.topic, q.id, q.limit, a.cfg.MaxConsumeBytes)
	if err != nil || res.Batches > 0 || q.wait <= 0 {
		return res, err
	}
	off := res.Offset
	res.Release()
	woken := make(chan struct{}, 1)
	cancel, err := c.svc.Watch(c.caller, c.topic, off, func() {
		select {
		case woken <- struct{}{}:
		default:
		}
	})
	if err != nil {
		return nil, err
	}
	defer cancel()
	timer := time.NewTimer(q.wait)
	defer timer.Stop()
	select {
	case <-woken:
	case <-timer.C:
	case <-r.Context().Done():
	}
	return c.svc.Read(c.caller, c.topic, off, q.limit, a.cfg.MaxConsumeBytes)
}

// maxDecodedBatch bounds the decompressed size of one stored batch that an
// HTTP consume will decode.
const maxDecodedBatch = 64 << 20

// consumeResp is a consume's response as messages: slices of the batches
// read, or of the bodies decoded from them, valid while those are held.
type consumeResp struct {
	msgs  [][]byte
	sizes string // X-Sizes
	n     int64  // the body's length
}

// messages finds the messages [res.Offset, res.Offset+limit) of res, at
// most Config.MaxConsumeBytes of them but the first, and files them in
// out. What it buffers is reserved in held first: the batches read (into
// raw), then each compressed batch's decoded size (RawSize), decoded into
// a buffer of its own that the response is written from. A compressed
// body is decoded by svc, on the decode threads.
func (a *API) messages(svc *service.Service, caller service.Caller, raw *bytebufferpool.ByteBuffer, res *service.ReadResult, limit int, held *reservation, out *consumeResp) error {
	if err := held.grow(res.Bytes); err != nil {
		return err
	}
	var err error
	if raw.B, err = res.AppendTo(raw.B[:0]); err != nil {
		return err
	}
	from, to := res.Offset, res.Offset+int64(limit)
	var sizes []byte
	full := false
	for b := raw.B; len(b) > 0 && !full; {
		bt, n, err := protocol.ParseBatch(b)
		if err == nil {
			err = bt.Verify()
		}
		if err == nil && bt.RawSize > maxDecodedBatch {
			err = fmt.Errorf("decoded size %d is over %d bytes", bt.RawSize, maxDecodedBatch)
		}
		if err == nil && bt.Codec != protocol.CodecNone {
			if gerr := held.grow(int64(bt.RawSize)); gerr != nil {
				return gerr
			}
		}
		var body []byte
		if err == nil {
			var dst []byte
			if bt.Codec != protocol.CodecNone {
				dst = make([]byte, 0, bt.RawSize) // exactly what was reserved
			}
			body, err = svc.DecodeBody(caller, &bt, dst) // compressed: on the decode threads
		}
		if err != nil {
			return fmt.Errorf("%w: batch at offset %d: %w", ErrDecode, bt.BaseOffset, err)
		}
		b = b[n:]
		headers := bt.Flags&protocol.FlagHeaders != 0
		err = protocol.Messages(body, bt.Count, bt.BaseOffset, func(off int64, m []byte) error {
			if off < from || off >= to || full {
				return nil
			}
			if headers {
				// Messages are served as values only; their headers
				// are not (docs/http.md).
				var err error
				if m, err = protocol.HeaderValue(m); err != nil {
					return err
				}
			}
			if len(out.msgs) > 0 && out.n+int64(len(m)) > a.cfg.MaxConsumeBytes {
				// Decoded bytes are bounded too, within a batch as
				// between them: the client asks again from X-Id plus
				// the count.
				full = true
				return nil
			}
			if len(sizes) > 0 {
				sizes = append(sizes, ':')
			}
			sizes = strconv.AppendInt(sizes, int64(len(m)), 10)
			out.msgs = append(out.msgs, m)
			out.n += int64(len(m))
			return nil
		})
		if err != nil {
			return fmt.Errorf("%w: batch at offset %d: %w", ErrDecode, bt.BaseOffset, err)
		}
	}
	out.sizes = string(sizes)
	return nil
}

// stageSize is the staging buffer a consume's messages are written
// through: small messages are gathered into writes of this size rather
// than written one by one.
const stageSize = 64 << 10

var stagePool = sync.Pool{New: func() any { return new([stageSize]byte) }}

// writeMessages writes msgs to w one after the other, gathering small
// ones into stageSize writes. A write error (the client gone) ends it.
func writeMessages(w http.ResponseWriter, msgs [][]byte) {
	st := stagePool.Get().(*[stageSize]byte)
	defer stagePool.Put(st)
	buf := st[:0]
	for _, m := range msgs {
		if len(buf)+len(m) > stageSize && len(buf) > 0 {
			if _, err := w.Write(buf); err != nil {
				return
			}
			buf = buf[:0]
		}
		if len(m) >= stageSize {
			if _, err := w.Write(m); err != nil {
				return
			}
			continue
		}
		buf = append(buf, m...)
	}
	if len(buf) > 0 {
		_, _ = w.Write(buf)
	}
}
