package bench

import (
	"fmt"
	"html/template"
	"io"
	"math"
	"strings"
	"time"
)

// WriteReport writes a self-contained HTML page for res: the figures, the
// throughput over the timed phase and the latency distribution as inline
// SVG charts. It loads nothing from anywhere (no scripts, no styles, no
// fonts from a network), so it opens offline; it is also well-formed XML.
func WriteReport(w io.Writer, res *Result) error {
	title := fmt.Sprintf("haraqa-bench: %s, %d B, batch %d", res.Mode, res.Size, res.Batch)
	var sb strings.Builder
	if err := res.WriteTable(&sb); err != nil {
		return err
	}
	data := struct {
		Title, Summary, Generated string
		Throughput, Latency       template.HTML
	}{
		Title:      title,
		Summary:    sb.String(),
		Generated:  time.Now().UTC().Format(time.RFC3339),
		Throughput: template.HTML(throughputChart(res)),
		Latency:    template.HTML(latencyChart(res)),
	}
	return reportPage.Execute(w, data)
}

var reportPage = template.Must(template.New("report").Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8"/>
<title>{{.Title}}</title>
<style>
body { font-family: sans-serif; margin: 2em; color: #222; max-width: 60em; }
pre { background: #f4f4f4; padding: 1em; overflow-x: auto; font-size: 12px; }
svg { background: #fff; border: 1px solid #ddd; }
svg text { font-family: sans-serif; font-size: 12px; fill: #333; }
.grid { stroke: #e6e6e6; }
.axis { stroke: #888; }
</style>
</head>
<body>
<h1>{{.Title}}</h1>
<pre>{{.Summary}}</pre>
<h2>Throughput over the timed phase</h2>
{{.Throughput}}
<h2>Latency distribution</h2>
{{.Latency}}
<p>Generated {{.Generated}} by haraqa-bench.</p>
</body>
</html>
`))

// Chart geometry, in SVG user units.
const (
	chartW, chartH                   = 760, 320
	padL, padR, padT, padB           = 70, 50, 20, 45
	plotW, plotH                     = chartW - padL - padR, chartH - padT - padB
	colorHaraqa, colorSecond         = "#1f77b4", "#d62728"
	noData                           = `<p>No data.</p>`
	throughputInterval       float64 = 0.1 // seconds per sample
)

// series is one line of a chart.
type series struct {
	name  string
	color string
	x, y  []float64
}

// throughputChart plots messages per second over each sample interval.
func throughputChart(res *Result) string {
	if len(res.Series) == 0 {
		return noData
	}
	rates := func(pick func(Sample) int64) series {
		var s series
		prevT, prevN := 0.0, int64(0)
		for _, smp := range res.Series {
			dt := smp.Seconds - prevT
			if dt <= 0 {
				continue
			}
			n := pick(smp)
			s.x = append(s.x, smp.Seconds)
			s.y = append(s.y, float64(n-prevN)/dt)
			prevT, prevN = smp.Seconds, n
		}
		return s
	}
	var lines []series
	if res.Mode != ModeConsume {
		s := rates(func(s Sample) int64 { return s.Produced })
		s.name, s.color = "produced msgs/s", colorHaraqa
		lines = append(lines, s)
	}
	if res.Mode != ModeProduce {
		s := rates(func(s Sample) int64 { return s.Consumed })
		s.name, s.color = "consumed msgs/s", colorSecond
		if res.Mode == ModeConsume {
			s.color = colorHaraqa
		}
		lines = append(lines, s)
	}
	return lineChart(lines, "seconds", "messages/s", linearAxis, linearAxis)
}

// latencyChart plots latency against percentile on the "nines" scale.
func latencyChart(res *Result) string {
	var lines []series
	add := func(name, color string, pts []percentilePoint) {
		if len(pts) == 0 {
			return
		}
		s := series{name: name, color: color}
		for _, p := range pts {
			s.x = append(s.x, nines(p.Percentile))
			s.y = append(s.y, max(p.Micros, 1))
		}
		lines = append(lines, s)
	}
	add("haraqa ("+latencyNote(res.LatencyKind)+")", colorHaraqa, distribution(res.hist))
	if res.ceilHist != nil {
		add("ceiling ("+res.CeilingKind+")", colorSecond, distribution(res.ceilHist))
	}
	if len(lines) == 0 {
		return noData
	}
	return lineChart(lines, "percentile", "latency (us)", ninesAxis, logAxis)
}

// nines maps a percentile to log10(1/(1-p)): 90% is 1, 99% is 2.
func nines(p float64) float64 { return math.Log10(1 / (1 - min(p, 99.99999)/100)) }

// axis maps data to [0,1] and names its ticks.
type axis func(lo, hi float64) (scale func(float64) float64, ticks []tick)

type tick struct {
	at    float64 // in data units
	label string
}

func linearAxis(lo, hi float64) (func(float64) float64, []tick) {
	lo = min(lo, 0)
	if hi <= lo {
		hi = lo + 1
	}
	step := niceStep((hi - lo) / 5)
	hi = math.Ceil(hi/step) * step
	var ticks []tick
	for v := lo; v <= hi+step/2; v += step {
		ticks = append(ticks, tick{v, shortNumber(v)})
	}
	return func(v float64) float64 { return (v - lo) / (hi - lo) }, ticks
}

func logAxis(lo, hi float64) (func(float64) float64, []tick) {
	lo = math.Pow(10, math.Floor(math.Log10(max(lo, 1))))
	hi = math.Pow(10, math.Ceil(math.Log10(max(hi, lo*10))))
	var ticks []tick
	for v := lo; v <= hi*1.001; v *= 10 {
		ticks = append(ticks, tick{v, shortNumber(v)})
	}
	l, h := math.Log10(lo), math.Log10(hi)
	return func(v float64) float64 { return (math.Log10(max(v, lo)) - l) / (h - l) }, ticks
}

func ninesAxis(_, hi float64) (func(float64) float64, []tick) {
	top := max(math.Ceil(hi), 1)
	ticks := []tick{{0, "0%"}, {nines(50), "50%"}}
	labels := []string{"90%", "99%", "99.9%", "99.99%", "99.999%", "99.9999%"}
	for i := 1; i <= int(top) && i <= len(labels); i++ {
		ticks = append(ticks, tick{float64(i), labels[i-1]})
	}
	return func(v float64) float64 { return v / top }, ticks
}

// niceStep rounds x up to 1, 2 or 5 times a power of ten.
func niceStep(x float64) float64 {
	if x <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(x)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= x {
			return m * p
		}
	}
	return 10 * p
}

// shortNumber writes v with k/M suffixes.
func shortNumber(v float64) string {
	switch a := math.Abs(v); {
	case a >= 1e9:
		return trimZero(fmt.Sprintf("%.1f", v/1e9)) + "G"
	case a >= 1e6:
		return trimZero(fmt.Sprintf("%.1f", v/1e6)) + "M"
	case a >= 1e3:
		return trimZero(fmt.Sprintf("%.1f", v/1e3)) + "k"
	}
	return trimZero(fmt.Sprintf("%.1f", v))
}

func trimZero(s string) string { return strings.TrimSuffix(s, ".0") }

// lineChart draws the series as an inline SVG with a legend.
func lineChart(lines []series, xLabel, yLabel string, xa, ya axis) string {
	xlo, xhi, ylo, yhi := math.Inf(1), math.Inf(-1), math.Inf(1), math.Inf(-1)
	for _, s := range lines {
		for i := range s.x {
			xlo, xhi = min(xlo, s.x[i]), max(xhi, s.x[i])
			ylo, yhi = min(ylo, s.y[i]), max(yhi, s.y[i])
		}
	}
	if math.IsInf(xlo, 0) {
		return noData
	}
	fx, xt := xa(xlo, xhi)
	fy, yt := ya(ylo, yhi)
	px := func(v float64) float64 { return padL + fx(v)*plotW }
	py := func(v float64) float64 { return padT + (1-fy(v))*plotH }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg width="%d" height="%d" viewBox="0 0 %d %d" role="img">`+"\n", chartW, chartH+20*len(lines), chartW, chartH+20*len(lines))
	for _, t := range yt {
		y := py(t.at)
		fmt.Fprintf(&b, `<line class="grid" x1="%d" y1="%.1f" x2="%d" y2="%.1f"/>`, padL, y, padL+plotW, y)
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", padL-6, y+4, template.HTMLEscapeString(t.label))
	}
	for _, t := range xt {
		x := px(t.at)
		fmt.Fprintf(&b, `<line class="grid" x1="%.1f" y1="%d" x2="%.1f" y2="%d"/>`, x, padT, x, padT+plotH)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", x, padT+plotH+16, template.HTMLEscapeString(t.label))
	}
	fmt.Fprintf(&b, `<line class="axis" x1="%d" y1="%d" x2="%d" y2="%d"/>`, padL, padT+plotH, padL+plotW, padT+plotH)
	fmt.Fprintf(&b, `<line class="axis" x1="%d" y1="%d" x2="%d" y2="%d"/>`+"\n", padL, padT, padL, padT+plotH)
	fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">%s</text>`+"\n", padL+plotW/2, padT+plotH+36, template.HTMLEscapeString(xLabel))
	fmt.Fprintf(&b, `<text x="14" y="%d" text-anchor="middle" transform="rotate(-90 14 %d)">%s</text>`+"\n",
		padT+plotH/2, padT+plotH/2, template.HTMLEscapeString(yLabel))
	for i, s := range lines {
		var pts strings.Builder
		for j := range s.x {
			fmt.Fprintf(&pts, "%.1f,%.1f ", px(s.x[j]), py(s.y[j]))
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"><title>%s</title></polyline>`+"\n",
			s.color, strings.TrimSpace(pts.String()), template.HTMLEscapeString(s.name))
		ly := chartH + 20*i + 5
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="14" height="4" fill="%s"/>`, padL, ly, s.color)
		fmt.Fprintf(&b, `<text x="%d" y="%d">%s</text>`+"\n", padL+20, ly+6, template.HTMLEscapeString(s.name))
	}
	b.WriteString("</svg>\n")
	return b.String()
}
