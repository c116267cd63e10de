package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Cell is one configuration of the matrix.
type Cell struct {
	Mode    Mode
	Size    int
	Batch   int
	Volumes int
}

// StandardMatrix is the matrix of `make bench`: 100 B and 1 KiB messages,
// batches of 1, 100 and 1000, 1 and 3 volumes, produce, consume and both.
func StandardMatrix() []Cell {
	var cells []Cell
	for _, mode := range []Mode{ModeProduce, ModeConsume, ModeBoth} {
		for _, size := range []int{100, 1024} {
			for _, batch := range []int{1, 100, 1000} {
				for _, vols := range []int{1, 3} {
					cells = append(cells, Cell{mode, size, batch, vols})
				}
			}
		}
	}
	return cells
}

// MatrixConfig configures RunMatrix. Start from DefaultMatrixConfig.
type MatrixConfig struct {
	// Reps is the number of runs of each cell (default 3); the table
	// gives their medians.
	Reps int
	// Out is the markdown file whose section RewriteSection rewrites
	// (used by the command; default "": print it).
	Out string
	// Duration and Warmup are each run's -duration and -warmup (default
	// 1s and 300ms: the standard matrix takes about 6 minutes here).
	Duration, Warmup time.Duration
	// Dir is each run's -dir (default "": the system's temporary directory).
	Dir string
	// Exe is the haraqa-bench binary each run executes, so every run is a
	// fresh process (required).
	Exe string
	// Log receives a line per run (nil: nothing).
	Log io.Writer
	// Cells is the matrix (default StandardMatrix()).
	Cells []Cell
	// RunTimeout bounds one run (default 3 minutes).
	RunTimeout time.Duration
}

// DefaultMatrixConfig returns the defaults.
func DefaultMatrixConfig() MatrixConfig {
	return MatrixConfig{Reps: 3, Duration: time.Second, Warmup: 300 * time.Millisecond,
		Cells: StandardMatrix(), RunTimeout: 3 * time.Minute}
}

// Validate checks the configuration; its errors wrap ErrUsage.
func (mc *MatrixConfig) Validate() error {
	switch {
	case mc.Reps < 1 || mc.Reps > 100:
		return fmt.Errorf("%w: reps %d: want 1 to 100", ErrUsage, mc.Reps)
	case mc.Duration <= 0:
		return fmt.Errorf("%w: the matrix needs a positive -duration", ErrUsage)
	case mc.Warmup < 0:
		return fmt.Errorf("%w: warmup %s must not be negative", ErrUsage, mc.Warmup)
	case len(mc.Cells) == 0:
		return fmt.Errorf("%w: an empty matrix", ErrUsage)
	}
	return nil
}

// Args returns the haraqa-bench flags of one run of cell c.
func (mc *MatrixConfig) Args(c Cell) []string {
	return mc.args(string(c.Mode), strconv.Itoa(c.Size), strconv.Itoa(c.Batch), strconv.Itoa(c.Volumes))
}

func (mc *MatrixConfig) args(mode, size, batch, volumes string) []string {
	args := []string{"-embedded", "-mode", mode, "-size", size, "-batch", batch, "-volumes", volumes,
		"-duration", mc.Duration.String(), "-warmup", mc.Warmup.String(), "-ceiling", "-json"}
	if mc.Dir != "" {
		args = append(args, "-dir", mc.Dir)
	}
	return args
}

// Matrix is what RunMatrix measured.
type Matrix struct {
	Config  MatrixConfig
	Machine Machine
	Started time.Time
	Took    time.Duration
	Rows    []MatrixRow
}

// MatrixRow is one cell's runs.
type MatrixRow struct {
	Cell
	Runs   []*Result // the runs that succeeded
	Failed []string  // why the others failed
}

// RunMatrix runs every cell Reps times, each run a fresh process of
// mc.Exe, cells interleaved (every cell once, then again), so slow drifts
// of a shared machine spread over all cells. It returns what it measured
// even when runs failed, with an error naming them (ErrMatrix).
func RunMatrix(ctx context.Context, mc MatrixConfig) (*Matrix, error) {
	if err := mc.Validate(); err != nil {
		return nil, err
	}
	if mc.Exe == "" {
		return nil, fmt.Errorf("%w: no binary to run", ErrUsage)
	}
	if mc.RunTimeout <= 0 {
		mc.RunTimeout = 3 * time.Minute
	}
	m := &Matrix{Config: mc, Machine: ThisMachine(), Started: time.Now()}
	m.Rows = make([]MatrixRow, len(mc.Cells))
	for i, c := range mc.Cells {
		m.Rows[i].Cell = c
	}
	failed := 0
	total := mc.Reps * len(mc.Cells)
	for rep := range mc.Reps {
		for i := range m.Rows {
			row := &m.Rows[i]
			if ctx.Err() != nil {
				m.Took = time.Since(m.Started)
				return m, ErrInterrupted
			}
			t0 := time.Now()
			res, err := mc.runOnce(ctx, row.Cell)
			n := rep*len(mc.Cells) + i + 1
			if err != nil {
				failed++
				row.Failed = append(row.Failed, err.Error())
				mc.logf("[%d/%d] %s: FAILED: %v\n", n, total, mc.describe(row.Cell), err)
				continue
			}
			row.Runs = append(row.Runs, res)
			ratio := "-"
			if res.RatioToCeiling != nil {
				ratio = ratioText(*res.RatioToCeiling)
			}
			mc.logf("[%d/%d] %s: %.0f msgs/s, %.1f MB/s, p50 %.0f us, ratio %s (%.1fs)\n", n, total,
				mc.describe(row.Cell), res.MsgsPerSec, res.MBPerSec, res.Latency.P50, ratio, time.Since(t0).Seconds())
		}
	}
	m.Took = time.Since(m.Started)
	if failed > 0 {
		return m, fmt.Errorf("%w: %d of %d runs failed", ErrMatrix, failed, total)
	}
	return m, nil
}

func (mc *MatrixConfig) describe(c Cell) string {
	return fmt.Sprintf("%s size=%d batch=%d volumes=%d", c.Mode, c.Size, c.Batch, c.Volumes)
}

func (mc *MatrixConfig) logf(format string, args ...any) {
	if mc.Log != nil {
		fmt.Fprintf(mc.Log, format, args...)
	}
}

// runOnce runs one cell in a fresh process and parses its JSON. A run
// whose result is not OK (failed requests, gaps) counts as failed.
func (mc *MatrixConfig) runOnce(ctx context.Context, c Cell) (*Result, error) {
	ctx, cancel := context.WithTimeout(ctx, mc.RunTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, mc.Exe, mc.Args(c)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var res Result
	if jerr := json.Unmarshal(stdout.Bytes(), &res); jerr != nil {
		return nil, fmt.Errorf("%w: %s", errors.Join(err, jerr), lastLine(stderr.String()))
	}
	if err != nil || !res.OK() {
		return nil, fmt.Errorf("%d errors, %d missing, %d duplicated, %d corrupt: %s",
			res.Errors, res.Gaps, res.Duplicates, res.Corrupt, lastLine(stderr.String()))
	}
	return &res, nil
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	return s
}

// median returns the median of the values f picks from the runs (the mean
// of the middle two for an even count); ok is false when no run has one.
func median(runs []*Result, f func(*Result) (float64, bool)) (float64, bool) {
	var v []float64
	for _, r := range runs {
		if x, ok := f(r); ok {
			v = append(v, x)
		}
	}
	if len(v) == 0 {
		return 0, false
	}
	slices.Sort(v)
	if n := len(v); n%2 == 1 {
		return v[n/2], true
	} else {
		return (v[n/2-1] + v[n/2]) / 2, true
	}
}

func always(f func(*Result) float64) func(*Result) (float64, bool) {
	return func(r *Result) (float64, bool) { return f(r), true }
}

func optional(f func(*Result) *float64) func(*Result) (float64, bool) {
	return func(r *Result) (float64, bool) {
		if p := f(r); p != nil {
			return *p, true
		}
		return 0, false
	}
}

// Machine describes the host a matrix ran on.
type Machine struct {
	Cores  int
	CPU    string // model name from /proc/cpuinfo
	Kernel string // uname -sr
	Memory string // MemTotal from /proc/meminfo
	Go     string
}

// ThisMachine describes the host.
func ThisMachine() Machine {
	m := Machine{Cores: runtime.NumCPU(), Go: runtime.Version(), CPU: "unknown", Kernel: "unknown", Memory: "unknown"}
	if v, ok := procField("/proc/cpuinfo", "model name"); ok {
		m.CPU = v
	}
	if v, ok := procField("/proc/meminfo", "MemTotal"); ok {
		if kb, err := strconv.ParseInt(strings.Fields(v)[0], 10, 64); err == nil {
			m.Memory = fmt.Sprintf("%.0f GiB", float64(kb)/(1<<20))
		}
	}
	var u syscall.Utsname
	if syscall.Uname(&u) == nil {
		m.Kernel = utsString(u.Sysname[:]) + " " + utsString(u.Release[:])
	}
	return m
}

func utsString[T int8 | uint8](b []T) string {
	var sb strings.Builder
	for _, c := range b {
		if c == 0 {
			break
		}
		sb.WriteByte(byte(c))
	}
	return sb.String()
}

// procField returns the value of the first "key : value" line of a /proc file.
func procField(path, key string) (string, bool) {
	f, err := os.Open(path)
	if err != nil {
		return "", false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == key && strings.TrimSpace(v) != "" {
			return strings.TrimSpace(v), true
		}
	}
	return "", false
}

// Section markers: RewriteSection replaces what lies between them, so
// only Markdown's output belongs there; hand-written text goes outside.
const (
	MarkerBegin = "<!-- bench-matrix:begin -->"
	MarkerEnd   = "<!-- bench-matrix:end -->"
)

// MatrixHeading is the one heading Markdown writes between the markers.
const MatrixHeading = "## Load tool matrix"

// Markdown renders the matrix as the section between the markers,
// markers included.
func (m *Matrix) Markdown() string {
	mc := m.Config
	var b strings.Builder
	b.WriteString(MarkerBegin + "\n")
	b.WriteString(MatrixHeading + "\n\n")
	fmt.Fprintf(&b, "Written by `haraqa-bench -matrix` on %s in %s. Do not edit by hand: it is rewritten between the markers.\n\n",
		m.Started.UTC().Format("2006-01-02 15:04 UTC"), m.Took.Round(time.Second))
	mm := m.Machine
	fmt.Fprintf(&b, "Machine: %d cores (%s), %s, %s memory, %s.\n\n", mm.Cores, mm.CPU, mm.Kernel, mm.Memory, mm.Go)
	fmt.Fprintf(&b, "Each row is the median of %d run(s) (cells interleaved: every cell once, then again), each a fresh process "+
		"with an in-process server on fresh temporary volumes (fsync never, default options):\n\n", mc.Reps)
	b.WriteString("```\n" + "haraqa-bench " + strings.Join(mc.args("MODE", "SIZE", "BATCH", "VOLUMES"), " ") + "\n```\n\n")
	b.WriteString("with MODE, SIZE, BATCH and VOLUMES from the row (`haraqa-bench` is `go run ./cmd/haraqa-bench`; the exact commands are listed below the table). ")
	b.WriteString("Batch 1 waits for each acknowledgement before the next message (`-single produce`). ")
	b.WriteString("Consume fills the topic for the duration first (untimed), then times reading all of it. ")
	b.WriteString("Latency is per request round trip, or end to end per message for both. ")
	b.WriteString("The ceiling is measured in the same run: for produce and both, the same payload bytes in the same request-size chunks over loopback TCP into plain file appends on as many volumes, each chunk acknowledged; ")
	b.WriteString("for batch 1 produce, a TCP ping-pong of one message; for consume, sendfile(2) of a file of the same size over loopback. The ceiling's p50 per request or round trip is in brackets. ")
	b.WriteString("Ratio = haraqa MB/s / ceiling MB/s, the median of each run's ratio. MB = 10^6 bytes.\n\n")
	b.WriteString("| mode | size | batch | volumes | msgs/s | MB/s | p50 us | p99 us | ceiling MB/s | ratio | zero-copy |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for i := range m.Rows {
		r := &m.Rows[i]
		if len(r.Runs) == 0 {
			fmt.Fprintf(&b, "| %s | %s | %d | %d | failed | | | | | | |\n", r.Mode, sizeText(r.Size), r.Batch, r.Volumes)
			continue
		}
		msgs, _ := median(r.Runs, always(func(x *Result) float64 { return x.MsgsPerSec }))
		mbs, _ := median(r.Runs, always(func(x *Result) float64 { return x.MBPerSec }))
		p50, _ := median(r.Runs, always(func(x *Result) float64 { return x.Latency.P50 }))
		p99, _ := median(r.Runs, always(func(x *Result) float64 { return x.Latency.P99 }))
		ceil := "-"
		if v, ok := median(r.Runs, optional(func(x *Result) *float64 { return x.CeilingMBPerSec })); ok {
			ceil = fmt.Sprintf("%.1f", v)
			if cp, ok := median(r.Runs, func(x *Result) (float64, bool) {
				if x.CeilingLatency == nil {
					return 0, false
				}
				return x.CeilingLatency.P50, true
			}); ok {
				ceil += fmt.Sprintf(" (%.0f us)", cp)
			}
		}
		ratio := "-"
		if v, ok := median(r.Runs, optional(func(x *Result) *float64 { return x.RatioToCeiling })); ok {
			ratio = ratioText(v)
		}
		zc := "-"
		if v, ok := median(r.Runs, optional(func(x *Result) *float64 { return x.ZeroCopyShare })); ok {
			zc = fmt.Sprintf("%.0f%%", 100*v)
		}
		fail := ""
		if len(r.Failed) > 0 {
			fail = fmt.Sprintf(" (%d failed)", len(r.Failed))
		}
		fmt.Fprintf(&b, "| %s | %s | %d | %d | %s%s | %.1f | %.0f | %.0f | %s | %s | %s |\n",
			r.Mode, sizeText(r.Size), r.Batch, r.Volumes, groupThousands(msgs), fail, mbs, p50, p99, ceil, ratio, zc)
	}
	b.WriteString("\n<details><summary>The exact commands</summary>\n\n```\n")
	for i := range m.Rows {
		b.WriteString("haraqa-bench " + strings.Join(mc.Args(m.Rows[i].Cell), " ") + "\n")
	}
	b.WriteString("```\n\n</details>\n")
	b.WriteString(MarkerEnd + "\n")
	return b.String()
}

func sizeText(n int) string { return fmt.Sprintf("%d B", n) }

// ratioText is a ratio to the ceiling, flagged when it is above 1: the
// ceiling run was starved (see Result.CeilingStarved).
func ratioText(v float64) string {
	if v > 1 {
		return fmt.Sprintf("%.2f (starved ceiling)", v)
	}
	return fmt.Sprintf("%.2f", v)
}

// groupThousands formats v rounded, with commas between thousands.
func groupThousands(v float64) string {
	s := strconv.FormatInt(int64(v+0.5), 10)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// CheckSection reports an error if the markdown file at path has, between
// its markers, a heading other than MatrixHeading: a hand-written section
// that RewriteSection would refuse to overwrite. A file that does not exist
// or has no markers is fine. The command checks this before a matrix run,
// so a misplaced section stops it before the run rather than after.
func CheckSection(path string) error {
	doc, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("%w: %w", ErrMatrix, err)
	}
	old, ok := currentSection(string(doc))
	if !ok {
		return nil
	}
	for _, h := range Headings(old) {
		if h != MatrixHeading {
			return fmt.Errorf("%w: %s: %w", ErrMatrix, path, handWritten(h))
		}
	}
	return nil
}

// Headings returns the markdown headings of doc (lines starting with '#'),
// leaving out lines inside fenced code blocks.
func Headings(doc string) []string {
	var hs []string
	fenced := false
	for line := range strings.Lines(doc) {
		line = strings.TrimRight(line, "\r\n")
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if !fenced && strings.HasPrefix(line, "#") {
			hs = append(hs, line)
		}
	}
	return hs
}

func handWritten(heading string) error {
	return fmt.Errorf("%q sits between %s and %s, where only the generated table belongs: move it outside the markers", heading, MarkerBegin, MarkerEnd)
}

// currentSection returns what lies between the markers of doc, markers
// excluded, and whether doc has both.
func currentSection(doc string) (string, bool) {
	begin := lineIndex(doc, MarkerBegin, 0)
	if begin < 0 {
		return "", false
	}
	end := lineIndex(doc, MarkerEnd, begin)
	if end < 0 {
		return "", false
	}
	from := begin + len(MarkerBegin)
	if nl := strings.IndexByte(doc[from:], '\n'); nl >= 0 {
		from += nl + 1
	}
	if from > end {
		from = end
	}
	return doc[from:end], true
}

// RewriteSection replaces the part of the markdown file at path from the
// line MarkerBegin to the line MarkerEnd (both included) with section,
// which should hold the markers itself; without the markers, section is
// appended. The rest of the file is kept byte for byte. A heading between
// the old markers that section does not have is hand-written text the
// rewrite would delete: then the file is left alone and an error names it.
// The file is replaced atomically (written beside it, then renamed).
func RewriteSection(path, section string) error {
	old, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%w: %w", ErrMatrix, err)
	}
	out, err := replaceSection(string(old), section)
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrMatrix, path, err)
	}
	mode := os.FileMode(0o644)
	if st, err := os.Stat(path); err == nil {
		mode = st.Mode().Perm()
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(out), mode); err != nil {
		return fmt.Errorf("%w: %w", ErrMatrix, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("%w: %w", ErrMatrix, err)
	}
	return nil
}

// replaceSection is RewriteSection on a string.
func replaceSection(doc, section string) (string, error) {
	if !strings.HasSuffix(section, "\n") {
		section += "\n"
	}
	begin := lineIndex(doc, MarkerBegin, 0)
	if begin < 0 {
		if lineIndex(doc, MarkerEnd, 0) >= 0 {
			return "", errors.New("an end marker without a begin marker")
		}
		if doc != "" && !strings.HasSuffix(doc, "\n") {
			doc += "\n"
		}
		if doc != "" {
			doc += "\n"
		}
		return doc + section, nil
	}
	end := lineIndex(doc, MarkerEnd, begin)
	if end < 0 {
		return "", errors.New("a begin marker without an end marker")
	}
	old, _ := currentSection(doc)
	keep := Headings(section)
	for _, h := range Headings(old) {
		if !slices.Contains(keep, h) {
			return "", handWritten(h)
		}
	}
	after := end + len(MarkerEnd)
	if after < len(doc) && doc[after] == '\n' {
		after++
	}
	return doc[:begin] + section + doc[after:], nil
}

// lineIndex returns the index of the first line of doc, at or after from,
// that is exactly marker (surrounding spaces allowed), or -1.
func lineIndex(doc, marker string, from int) int {
	for i := from; i < len(doc); {
		j := strings.IndexByte(doc[i:], '\n')
		line := doc[i:]
		if j >= 0 {
			line = doc[i : i+j]
		}
		if strings.TrimSpace(line) == marker {
			return i
		}
		if j < 0 {
			break
		}
		i += j + 1
	}
	return -1
}
