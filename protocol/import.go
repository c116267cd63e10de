package protocol

// --- import --------------------------------------------------------------

// ImportFlags modify an import request.
type ImportFlags uint16

// Import flags. Other bits are reserved and must be zero.
const (
	// ImportCreateTopic creates the topic if it does not exist.
	ImportCreateTopic ImportFlags = 1 << 0

	importFlagsKnown = ImportCreateTopic
)

// ImportRequest appends batches that another server stored, at their own
// offsets and with their own append times (the stamped fields of each
// batch's header), to a topic that holds nothing yet or has received only
// imports: how a topic moves between servers.
type ImportRequest struct {
	Flags ImportFlags
	// Offset is where the import goes on from: the topic's next offset,
	// or, into a topic that holds nothing yet, any offset >= 0, which
	// becomes its oldest. The first batch, if any, holds it.
	Offset int64
	Topic  []byte
	// Batches holds zero or more whole batches, concatenated, the rest of
	// the frame: each starts where the one before ends, with an append
	// time no earlier. They borrow from the payload.
	Batches []byte
}

// AppendImportRequest appends an import request carrying batches, whole
// stored batches concatenated (as a consume response holds them), at most
// 1<<32-1 bytes less the rest of the frame.
func AppendImportRequest(dst []byte, corrID uint32, topic string, flags ImportFlags, offset int64, batches []byte) []byte {
	start := len(dst)
	dst = appendRequestHeader(dst, OpImport, corrID)
	dst = appendU16(dst, uint16(flags))
	dst = appendI64(dst, offset)
	dst = appendU32(dst, uint32(len(batches)))
	dst = appendString(dst, topic)
	dst = append(dst, batches...)
	return finishFrame(dst, start)
}

// ParseImportRequest parses the payload of an import request. It checks
// that Batches is a sequence of whole batches whose headers parse
// (returning ParseBatch's errors as they are), that they follow each other
// in offsets and append times, and that the first holds Offset, but not
// their CRCs: the server verifies each before storing it. A negative
// offset or batches out of order parse with every field set and an error
// wrapping ErrInvalidArgument, as a bad topic does.
func ParseImportRequest(payload []byte) (ImportRequest, error) {
	r := reader{b: payload}
	req := ImportRequest{Flags: ImportFlags(r.u16())}
	if req.Flags&^importFlagsKnown != 0 && r.err == nil {
		return ImportRequest{}, errImportFlags
	}
	req.Offset = r.i64()
	size := r.u32()
	req.Topic, req.Batches = r.str(), r.rest()
	if r.err != nil {
		return ImportRequest{}, r.err
	}
	if uint64(size) != uint64(len(req.Batches)) {
		return ImportRequest{}, errBatchesSize
	}
	var order error
	if req.Offset < 0 {
		order = errImportOffset
	}
	var prev Batch
	for b, i := req.Batches, 0; len(b) > 0; i++ {
		bt, n, err := ParseBatch(b)
		if err != nil {
			return ImportRequest{}, err
		}
		b = b[n:]
		switch {
		case order != nil:
		case i == 0 && (bt.BaseOffset > req.Offset || bt.BaseOffset+int64(bt.Count) <= req.Offset):
			order = errImportFirst
		case i > 0 && bt.BaseOffset != prev.BaseOffset+int64(prev.Count):
			order = errImportGap
		case i > 0 && bt.AppendTime < prev.AppendTime:
			order = errImportTime
		}
		prev = bt
	}
	if order != nil {
		return req, order
	}
	return req, validTopic(req.Topic)
}

// ImportResponse is the payload of a successful import response.
type ImportResponse struct {
	OldestOffset int64 // the topic's oldest offset after the import
	NextOffset   int64 // the topic's next offset after the import
}

// AppendImportResponse appends a successful import response.
func AppendImportResponse(dst []byte, corrID uint32, resp ImportResponse) []byte {
	start := len(dst)
	dst = appendResponseHeader(dst, OpImport, CodeOK, corrID)
	dst = appendI64(dst, resp.OldestOffset)
	dst = appendI64(dst, resp.NextOffset)
	return finishFrame(dst, start)
}

// ParseImportResponse parses the payload of a successful import response.
func ParseImportResponse(payload []byte) (ImportResponse, error) {
	r := reader{b: payload}
	resp := ImportResponse{OldestOffset: r.i64(), NextOffset: r.i64()}
	if err := r.end(); err != nil {
		return ImportResponse{}, err
	}
	return resp, nil
}
