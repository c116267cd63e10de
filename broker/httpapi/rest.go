package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/valyala/bytebufferpool"

	"github.com/haraqa/haraqa/broker/auth"
	"github.com/haraqa/haraqa/protocol"
	"github.com/haraqa/haraqa/storage"
)

// Errors the REST API answers with, besides storage's.
var (
	// ErrBadRequest: a parameter or header is missing or malformed.
	ErrBadRequest = errors.New("httpapi: bad request")
	// ErrBusy: a bounded shared resource (the filter workers of list
	// topics' regexes) is fully taken; retry later.
	ErrBusy = errors.New("httpapi: server busy")
	// ErrNotReady: the volumes are still being recovered.
	ErrNotReady = errors.New("httpapi: server is starting: volumes are being recovered")
	// ErrTooLarge: a request body is over Config.MaxBodyBytes.
	ErrTooLarge = errors.New("httpapi: request body too large")
	// ErrDecode: a stored batch cannot be decoded for an HTTP consumer.
	ErrDecode = errors.New("httpapi: stored batch cannot be decoded")
)

func badRequest(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrBadRequest, fmt.Sprintf(format, args...))
}

// store returns the open store, or answers 503 while recovering.
func (a *API) store(w http.ResponseWriter) *storage.Store {
	st := a.state.Load()
	if st == nil {
		a.fail(w, ErrNotReady)
		return nil
	}
	return st.store
}

// invalidTopic is protocol's refusal of name, err, as a storage
// ErrInvalidTopic naming it: one "invalid topic name", then the reason.
func invalidTopic(name string, err error) error {
	return fmt.Errorf("%w %q: %s", storage.ErrInvalidTopic, name, strings.TrimPrefix(err.Error(), protocol.ErrInvalidTopic.Error()+": "))
}

// topicName returns the {topic} path value if it is a valid name.
func topicName(r *http.Request) (string, error) {
	name := r.PathValue("topic")
	if err := protocol.ValidTopic(name); err != nil {
		return "", invalidTopic(name, err)
	}
	return name, nil
}

// topicHandler serves a route on /topics/{topic} once the store is open
// and the name is valid.
type topicHandler func(w http.ResponseWriter, r *http.Request, s *storage.Store, name string)

// onTopic answers 503 while recovering, 400 for an invalid name, 401 or
// 403 when the token (Config.Auth) does not hold right on the topic, 307
// to the peer that has a topic this server lacks (Config.Peers), and
// otherwise calls h.
func (a *API) onTopic(right auth.Right, h topicHandler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s := a.store(w)
		if s == nil {
			return
		}
		name, err := topicName(r)
		if err != nil {
			a.fail(w, err)
			return
		}
		if !a.authorize(w, r, right, name) || a.elsewhere(w, r, s, name) {
			return
		}
		h(w, r, s, name)
	}
}

// fail answers err: its status, the X-Errors header and a one-line body.
// Messages are built from sentinels and the request only; an unexpected
// error (which may carry a server path) is logged and answered as
// "internal error".
func (a *API) fail(w http.ResponseWriter, err error) {
	status, msg := http.StatusInternalServerError, "internal error"
	switch {
	case errors.Is(err, protocol.ErrBatchTooLarge):
		status, msg = http.StatusRequestEntityTooLarge, "batch too large: the messages with their framing exceed the server's frame limit"
	case errors.Is(err, ErrBadRequest), errors.Is(err, storage.ErrInvalidTopic), errors.Is(err, storage.ErrInvalidBatch),
		errors.Is(err, storage.ErrInvalidGroup):
		status, msg = http.StatusBadRequest, err.Error()
	case errors.Is(err, storage.ErrGroupBusy), errors.Is(err, storage.ErrCommitConflict), errors.Is(err, storage.ErrTooManyGroups):
		status, msg = http.StatusConflict, err.Error()
	case errors.Is(err, storage.ErrTopicNotFound):
		status, msg = http.StatusNotFound, err.Error()
	case errors.Is(err, storage.ErrTopicExists):
		status, msg = http.StatusConflict, err.Error()
	case errors.Is(err, ErrTooLarge):
		status, msg = http.StatusRequestEntityTooLarge, err.Error()
	case errors.Is(err, storage.ErrOffsetOutOfRange):
		status, msg = http.StatusRequestedRangeNotSatisfiable, err.Error()
	case errors.Is(err, storage.ErrUnreadable), errors.Is(err, ErrDecode):
		status, msg = http.StatusInternalServerError, err.Error()
	case errors.Is(err, storage.ErrNoSpace):
		status, msg = http.StatusInsufficientStorage, err.Error()
	case errors.Is(err, storage.ErrReadOnly):
		status, msg = http.StatusServiceUnavailable, storage.ErrReadOnly.Error()
	case errors.Is(err, storage.ErrClosed):
		status, msg = http.StatusServiceUnavailable, "server is shutting down"
	case errors.Is(err, ErrNotReady), errors.Is(err, ErrPeerUnavailable):
		status, msg = http.StatusServiceUnavailable, err.Error()
	case errors.Is(err, ErrUnauthorized):
		status, msg = http.StatusUnauthorized, err.Error()
	case errors.Is(err, ErrForbidden):
		status, msg = http.StatusForbidden, err.Error()
	case errors.Is(err, ErrAuthLimited), errors.Is(err, ErrBusy), errors.Is(err, errTooManyWatchers):
		status, msg = http.StatusTooManyRequests, err.Error()
	default:
		a.cfg.Logger.Error("http request failed", "err", err)
	}
	msg = strings.TrimPrefix(strings.TrimPrefix(msg, "storage: "), "httpapi: ")
	msg = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return '?'
		}
		return r
	}, msg)
	h := w.Header()
	if s := sentinelOf(err); s != "" {
		h.Set("X-Errors", s) // the original client's word for it; the body says more
	} else {
		h.Set("X-Errors", msg)
	}
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Del("Content-Length")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, msg+"\n")
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// ready authenticates r and returns the store and broker, or answers
// (401, 429, 503 while recovering) and returns ok false.
func (a *API) ready(w http.ResponseWriter, r *http.Request) (st *state, grant *auth.Grant, ok bool) {
	if grant, ok = a.authenticate(w, r); !ok {
		return nil, nil, false
	}
	if st = a.state.Load(); st == nil {
		a.fail(w, ErrNotReady)
		return nil, nil, false
	}
	return st, grant, true
}

// GET /topics[?prefix=P][&regex=R]
func (a *API) listTopics(w http.ResponseWriter, r *http.Request) {
	st, grant, ok := a.ready(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	names := st.store.ListTopics(q.Get("prefix"))
	if a.cfg.Auth != nil {
		names = grant.Filter(names)
	}
	if expr := q.Get("regex"); expr != "" {
		// On the broker's filter workers: bounded, compiled once.
		var err error
		if names, err = st.broker.FilterTopics(expr, names); err != nil {
			var pe *protocol.Error
			switch {
			case errors.Is(err, protocol.ErrInvalidArgument):
				err = badRequest("%s", strings.TrimPrefix(err.Error(), protocol.ErrInvalidArgument.Error()+": "))
			case errors.As(err, &pe) && pe.Code == protocol.CodeLimitReached:
				err = fmt.Errorf("%w: %s", ErrBusy, pe.Message)
			}
			a.fail(w, err)
			return
		}
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

// topicAction serves PUT /topics/{topic} (create, 201) and DELETE
// /topics/{topic} (delete, 204): act on the named topic, answer status.
// Both are idempotent, as the original server's: creating a topic that
// exists is 201 again, deleting a missing one 204 (ok is the error that
// counts as done).
func (a *API) topicAction(act func(*storage.Store, string) error, status int, ok error) topicHandler {
	return func(w http.ResponseWriter, _ *http.Request, s *storage.Store, name string) {
		if err := act(s, name); err != nil && !errors.Is(err, ok) {
			a.fail(w, err)
			return
		}
		w.WriteHeader(status)
	}
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
func (a *API) topicInfo(w http.ResponseWriter, _ *http.Request, s *storage.Store, name string) {
	a.writeInfo(w, s, name, nil)
}

// writeInfo answers with topic name's info, unless err (or reading it) fails.
func (a *API) writeInfo(w http.ResponseWriter, s *storage.Store, name string, err error) {
	var info storage.TopicInfo
	if err == nil {
		info, err = s.Info(name)
	}
	if err != nil {
		a.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, topicInfo{name, info.Oldest, info.Next, info.Bytes, info.Segments, info.Oldest, info.Next})
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
func (a *API) truncate(w http.ResponseWriter, r *http.Request, s *storage.Store, name string) {
	var err error
	before := r.URL.Query().Get("before")
	if before == "" && r.ContentLength != 0 {
		var body struct {
			Truncate *int64 `json:"truncate"`
			Before   string `json:"before"`
		}
		dec := json.NewDecoder(io.LimitReader(r.Body, maxPatchBody))
		if derr := dec.Decode(&body); derr != nil || (body.Truncate == nil) == (body.Before == "") {
			a.fail(w, badRequestAs(sentinelJSON, `the body must be {"truncate":OFFSET} or {"before":"RFC3339 time"}`))
			return
		}
		if body.Truncate != nil {
			before = strconv.FormatInt(*body.Truncate, 10)
		} else {
			before = body.Before
		}
	}
	if off, perr := strconv.ParseInt(before, 10, 64); perr == nil {
		if off < 0 {
			a.fail(w, badRequest("before must not be negative"))
			return
		}
		err = s.Truncate(name, off)
	} else if t, terr := time.Parse(time.RFC3339Nano, before); terr == nil {
		if t.Before(minTime) || t.After(maxTime) {
			a.fail(w, badRequest("before %q is out of range: times from %s to %s can be stored", before, minTime.Format(time.RFC3339), maxTime.Format(time.RFC3339)))
			return
		}
		err = s.TruncateTime(name, t)
	} else {
		a.fail(w, badRequest("before must be an offset or an RFC 3339 time, got %q", before))
		return
	}
	a.writeInfo(w, s, name, err)
}

// parseSizes parses an X-Sizes header: message lengths joined by ':' that
// add up to total.
func parseSizes(h string, total int) ([]int, error) {
	if h == "" {
		return nil, badRequestAs(sentinelSizes, "X-Sizes header is required: the message lengths joined by ':'")
	}
	sizes := make([]int, 0, strings.Count(h, ":")+1)
	sum := 0
	for f := range strings.SplitSeq(h, ":") {
		n, err := strconv.Atoi(f)
		if err != nil || n < 0 || n > total {
			return nil, badRequestAs(sentinelSizes, "X-Sizes: %q is not a message length", f)
		}
		sum += n
		if sum > total {
			break
		}
		sizes = append(sizes, n)
	}
	if sum != total {
		return nil, badRequestAs(sentinelSizes, "X-Sizes add up to %d bytes or more, the body has %d", sum, total)
	}
	return sizes, nil
}

// POST /topics/{topic}, X-Sizes: 3:5:1
func (a *API) produce(w http.ResponseWriter, r *http.Request, s *storage.Store, name string) {
	if r.ContentLength > a.cfg.MaxBodyBytes {
		a.fail(w, fmt.Errorf("%w: %d bytes, the limit is %d", ErrTooLarge, r.ContentLength, a.cfg.MaxBodyBytes))
		return
	}
	body := bytebufferpool.Get()
	defer bytebufferpool.Put(body)
	if _, err := body.ReadFrom(http.MaxBytesReader(w, r.Body, a.cfg.MaxBodyBytes)); err != nil {
		if mbe := (*http.MaxBytesError)(nil); errors.As(err, &mbe) {
			a.fail(w, fmt.Errorf("%w: the limit is %d bytes", ErrTooLarge, mbe.Limit))
			return
		}
		a.fail(w, badRequest("reading the body: %v", err))
		return
	}
	sizes, err := parseSizes(r.Header.Get("X-Sizes"), body.Len())
	if err != nil {
		a.fail(w, err)
		return
	}
	msgs := make([][]byte, len(sizes))
	rest := body.B
	for i, n := range sizes {
		msgs[i], rest = rest[:n:n], rest[n:]
	}
	batch := bytebufferpool.Get()
	defer bytebufferpool.Put(batch)
	batch.B = protocol.AppendBatch(batch.B[:0], msgs...)
	base, err := s.Append(name, batch.B)
	if err != nil {
		a.fail(w, err)
		return
	}
	w.Header().Set("X-Id", strconv.FormatInt(base, 10))
	writeJSON(w, http.StatusOK, struct {
		Offset int64 `json:"offset"`
		Count  int   `json:"count"`
	}{base, len(sizes)})
}

// param returns the query parameter key, or else the header.
func param(r *http.Request, key, header string) string {
	if v := r.URL.Query().Get(key); v != "" {
		return v
	}
	return r.Header.Get(header)
}

// GET /topics/{topic}?id=OFFSET&limit=N&wait=D, or ?time=RFC3339 instead
// of id: from the first message appended at or after that time; with
// X-Consumer-Group: G and neither (or a negative id), from G's committed offset.
func (a *API) consume(w http.ResponseWriter, r *http.Request, s *storage.Store, name string) {
	var err error
	var id int64
	idParam := param(r, "id", "X-Id")
	if idParam != "" {
		if id, err = strconv.ParseInt(idParam, 10, 64); err != nil {
			a.fail(w, badRequestAs(sentinelID, "id must be an offset, got %q", idParam))
			return
		}
	}
	if v := r.URL.Query().Get("time"); v != "" {
		t, terr := time.Parse(time.RFC3339Nano, v)
		switch {
		case idParam != "":
			a.fail(w, badRequest("give id or time, not both"))
			return
		case terr != nil:
			a.fail(w, badRequest("time must be an RFC 3339 time such as 2026-12-01T09:00:00Z, got %q", v))
			return
		case t.Before(minTime) || t.After(maxTime):
			a.fail(w, badRequest("time %q is out of range: times from %s to %s can be stored", v, minTime.Format(time.RFC3339), maxTime.Format(time.RFC3339)))
			return
		}
		if id, err = s.OffsetAt(name, t); err != nil {
			a.fail(w, err)
			return
		}
	}
	// With a consumer group and no offset (or a negative one), read from
	// the group's committed offset and commit past what the response holds.
	group := param(r, "group", "X-Consumer-Group")
	idGiven := idParam != "" || r.URL.Query().Get("time") != ""
	grouped := group != "" && (!idGiven || id < 0)
	committed := int64(storage.NoOffset)
	if grouped {
		o, err := s.FetchOffset(name, group)
		if err != nil {
			a.fail(w, err)
			return
		}
		if o.Member != "" {
			a.fail(w, fmt.Errorf("%w: topic %q, group %q: a member holds the lease for %s more", storage.ErrGroupBusy, name, group, o.LeaseLeft.Round(time.Millisecond)))
			return
		}
		id, committed = o.Start, o.Committed
	}
	limit := a.cfg.DefaultLimit
	if v := param(r, "limit", "X-Limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < -1 || n == 0 {
			a.fail(w, badRequestAs(sentinelLimit, "limit must be a positive count or -1, got %q", v))
			return
		}
		limit = n
	}
	if limit <= 0 || limit > a.cfg.MaxMessages {
		limit = a.cfg.MaxMessages
	}
	var wait time.Duration
	if v := r.URL.Query().Get("wait"); v != "" {
		if wait, err = time.ParseDuration(v); err != nil || wait < 0 {
			a.fail(w, badRequest("wait must be a duration such as 500ms or 5s, got %q", v))
			return
		}
		wait = min(wait, a.cfg.MaxWait)
	}

	res, err := a.read(r, s, name, id, limit, wait)
	if err != nil {
		if errors.Is(err, storage.ErrOffsetOutOfRange) {
			if info, ierr := s.Info(name); ierr == nil {
				if id > info.Next {
					// Past the end: nothing there yet, as the original
					// server answers (its client polls on "no content").
					noContent(w, id)
					return
				}
				w.Header().Set("X-Oldest", strconv.FormatInt(info.Oldest, 10))
			}
		}
		a.fail(w, err)
		return
	}
	defer res.Release()
	if res.Batches == 0 {
		noContent(w, res.Offset)
		return
	}
	out := bytebufferpool.Get()
	defer bytebufferpool.Put(out)
	sizes, err := a.messages(out, res, limit)
	if err != nil {
		a.fail(w, err)
		return
	}
	if grouped {
		// Committed before the body is sent: a response lost on its way is
		// not read again by the group (at-most-once over HTTP). The commit
		// is conditional on the offset read, so two requests of the group
		// at once do not both get the same messages: the second gets 409.
		next := res.Offset
		if sizes != "" {
			next += int64(strings.Count(sizes, ":") + 1)
		}
		if err := s.CommitOffset(name, group, storage.Commit{Offset: next, Compare: true, Expect: committed}); err != nil {
			a.fail(w, err)
			return
		}
		w.Header().Set("X-Committed", strconv.FormatInt(next, 10))
	}
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("X-Id", strconv.FormatInt(res.Offset, 10))
	h.Set("X-Sizes", sizes)
	h.Set("Content-Length", strconv.Itoa(out.Len()))
	_, _ = w.Write(out.B)
}

// noContent answers a consume that found nothing at id: 204 with the
// original client's "no content".
func noContent(w http.ResponseWriter, id int64) {
	w.Header().Set("X-Id", strconv.FormatInt(id, 10))
	w.Header().Set("X-Errors", sentinelNoContent)
	w.WriteHeader(http.StatusNoContent)
}

// read reads from id, waiting up to wait for a first message.
func (a *API) read(r *http.Request, s *storage.Store, name string, id int64, limit int, wait time.Duration) (*storage.ReadResult, error) {
	res, err := s.Read(name, id, limit, a.cfg.MaxConsumeBytes)
	if err != nil {
		return nil, err
	}
	if res.Offset > res.End {
		res.Release()
		return nil, fmt.Errorf("%w: topic %q: offset %d is past the end (%d)", storage.ErrOffsetOutOfRange, name, res.Offset, res.End)
	}
	if res.Batches > 0 || wait <= 0 {
		return res, nil
	}
	off := res.Offset
	res.Release()
	woken := make(chan struct{}, 1)
	cancel, err := s.Watch(name, off, func() {
		select {
		case woken <- struct{}{}:
		default:
		}
	})
	if err != nil {
		return nil, err
	}
	defer cancel()
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case <-woken:
	case <-timer.C:
	case <-r.Context().Done():
	}
	return s.Read(name, off, limit, a.cfg.MaxConsumeBytes)
}

// maxDecodedBatch bounds the decompressed size of one stored batch that an
// HTTP consume will decode.
const maxDecodedBatch = 64 << 20

// messages appends the messages [res.Offset, res.Offset+limit) of res to out
// and returns their X-Sizes.
func (a *API) messages(out *bytebufferpool.ByteBuffer, res *storage.ReadResult, limit int) (string, error) {
	raw, dec := bytebufferpool.Get(), bytebufferpool.Get()
	defer bytebufferpool.Put(raw)
	defer bytebufferpool.Put(dec)
	var err error
	if raw.B, err = res.AppendTo(raw.B[:0]); err != nil {
		return "", err
	}
	from, to := res.Offset, res.Offset+int64(limit)
	var sizes []byte
	for b := raw.B; len(b) > 0; {
		bt, n, err := protocol.ParseBatch(b)
		if err == nil {
			err = bt.Verify()
		}
		if err == nil && bt.RawSize > maxDecodedBatch {
			err = fmt.Errorf("decoded size %d is over %d bytes", bt.RawSize, maxDecodedBatch)
		}
		var body []byte
		if err == nil {
			body, err = bt.DecodeBodyInto(dec.B[:0])
			if bt.Codec != protocol.CodecNone && err == nil {
				dec.B = body[:0] // keep the larger buffer for the next batch
			}
		}
		if err != nil {
			return "", fmt.Errorf("%w: batch at offset %d: %w", ErrDecode, bt.BaseOffset, err)
		}
		b = b[n:]
		headers := bt.Flags&protocol.FlagHeaders != 0
		err = protocol.Messages(body, bt.Count, bt.BaseOffset, func(off int64, m []byte) error {
			if off < from || off >= to {
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
			if len(sizes) > 0 {
				sizes = append(sizes, ':')
			}
			sizes = strconv.AppendInt(sizes, int64(len(m)), 10)
			out.B = append(out.B, m...)
			return nil
		})
		if err != nil {
			return "", fmt.Errorf("%w: batch at offset %d: %w", ErrDecode, bt.BaseOffset, err)
		}
		if int64(out.Len()) >= a.cfg.MaxConsumeBytes {
			break // decoded bytes are bounded too; the client asks again from X-Id plus the count
		}
	}
	return string(sizes), nil
}
