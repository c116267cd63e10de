package deploy

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/haraqa/haraqa/client"
)

// dashboardFile is the Grafana dashboard of deploy/grafana.
const dashboardFile = "grafana/haraqa.json"

// dashboard is what the tests read of a Grafana dashboard's JSON model.
type dashboard struct {
	UID        string  `json:"uid"`
	Title      string  `json:"title"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name  string          `json:"name"`
			Type  string          `json:"type"`
			Query json.RawMessage `json:"query"` // a string, or {"query": ...}
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID      int    `json:"id"`
	Type    string `json:"type"`
	Title   string `json:"title"`
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // a collapsed row's
}

// query is one PromQL expression of the dashboard and where it is.
type query struct {
	where, expr string
}

// queries returns every PromQL expression of d: each panel's targets
// (a collapsed row's panels included) and each query variable's query,
// with label_values(SELECTOR, LABEL) taken as its selector. A panel other
// than a row without a query, and a variable query of another kind, are
// errors.
func (d *dashboard) queries() ([]query, error) {
	var out []query
	var errs []string
	ids := map[int]bool{}
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if ids[p.ID] {
				errs = append(errs, fmt.Sprintf("panel id %d twice", p.ID))
			}
			ids[p.ID] = true
			if p.Type == "row" {
				walk(p.Panels)
				continue
			}
			if len(p.Targets) == 0 {
				errs = append(errs, fmt.Sprintf("panel %q has no query", p.Title))
			}
			for _, tg := range p.Targets {
				if strings.TrimSpace(tg.Expr) == "" {
					errs = append(errs, fmt.Sprintf("panel %q: query %s is empty", p.Title, tg.RefID))
				}
				out = append(out, query{fmt.Sprintf("panel %d %q query %s", p.ID, p.Title, tg.RefID), tg.Expr})
			}
		}
	}
	walk(d.Panels)
	labelValues := regexp.MustCompile(`^label_values\((.+),\s*[a-zA-Z_][a-zA-Z0-9_]*\)$`)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q string
		if json.Unmarshal(v.Query, &q) != nil {
			var obj struct {
				Query string `json:"query"`
			}
			if err := json.Unmarshal(v.Query, &obj); err != nil {
				errs = append(errs, fmt.Sprintf("variable %s: query %s", v.Name, v.Query))
				continue
			}
			q = obj.Query
		}
		m := labelValues.FindStringSubmatch(strings.TrimSpace(q))
		if m == nil {
			errs = append(errs, fmt.Sprintf("variable %s: %q is not label_values(SELECTOR, LABEL)", v.Name, q))
			continue
		}
		out = append(out, query{"variable " + v.Name, m[1]})
	}
	if len(errs) > 0 {
		return out, fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return out, nil
}

// promqlClauses take a parenthesised list of label names, not an
// expression.
var promqlClauses = map[string]bool{"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true}

// promqlWords are PromQL keywords that name no metric.
var promqlWords = map[string]bool{"bool": true, "and": true, "or": true, "unless": true, "offset": true,
	"atan2": true, "inf": true, "nan": true, "group_left": true, "group_right": true}

// promqlMetrics returns the metric names expr selects, in order of first
// use: every identifier that is not a function or aggregation (followed
// by "("), a keyword, a label name (inside {...}, or in the list of by,
// without, on, ignoring, group_left or group_right), a duration ([...],
// after offset) or inside a string. A selector naming its metric by a
// __name__ matcher is an error: the names could not be checked.
func promqlMetrics(expr string) ([]string, error) {
	var names []string
	isIdentStart := func(c byte) bool { return c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
	isIdent := func(c byte) bool { return isIdentStart(c) || c >= '0' && c <= '9' }
	skipTo := func(i int, close byte) (int, error) { // i at the opening char; returns past close
		for j := i + 1; j < len(expr); j++ {
			switch c := expr[j]; {
			case c == close:
				return j + 1, nil
			case c == '"' || c == '\'' || c == '`':
				end := strings.IndexByte(expr[j+1:], c)
				if end < 0 {
					return 0, fmt.Errorf("unterminated string at %d", j)
				}
				j += end + 1
			}
		}
		return 0, fmt.Errorf("no %q for the %q at %d", close, expr[i], i)
	}
	for i := 0; i < len(expr); {
		c := expr[i]
		switch {
		case c == '"' || c == '\'' || c == '`':
			end := strings.IndexByte(expr[i+1:], c)
			if end < 0 {
				return nil, fmt.Errorf("%q: unterminated string at %d", expr, i)
			}
			i += end + 2
		case c == '{':
			j, err := skipTo(i, '}')
			if err != nil {
				return nil, fmt.Errorf("%q: %w", expr, err)
			}
			if strings.Contains(expr[i:j], "__name__") {
				return nil, fmt.Errorf("%q: a __name__ matcher: name the metric instead", expr)
			}
			i = j
		case c == '[':
			j, err := skipTo(i, ']')
			if err != nil {
				return nil, fmt.Errorf("%q: %w", expr, err)
			}
			i = j
		case c == '$': // a Grafana variable outside a string or a range
			i++
			for i < len(expr) && (isIdent(expr[i]) || expr[i] == '{' || expr[i] == '}') {
				i++
			}
		case c >= '0' && c <= '9' || c == '.':
			for i < len(expr) && (isIdent(expr[i]) || expr[i] == '.') {
				i++ // a number or a duration (5m, 1h30m, 1e3, 0x1f)
			}
		case isIdentStart(c):
			j := i
			for j < len(expr) && isIdent(expr[j]) {
				j++
			}
			word := expr[i:j]
			k := j
			for k < len(expr) && (expr[k] == ' ' || expr[k] == '\t' || expr[k] == '\n') {
				k++
			}
			switch {
			case promqlClauses[word] && k < len(expr) && expr[k] == '(':
				end, err := skipTo(k, ')')
				if err != nil {
					return nil, fmt.Errorf("%q: %w", expr, err)
				}
				j = end
			case k < len(expr) && expr[k] == '(':
				// a function or an aggregation
			case aggregationClause(expr[k:]):
				// an aggregation with its clause first: sum by (x) (...)
			case promqlWords[strings.ToLower(word)]:
			default:
				if !slices.Contains(names, word) {
					names = append(names, word)
				}
			}
			i = j
		default:
			i++
		}
	}
	return names, nil
}

// aggregationClause reports whether rest starts with by or without and a
// parenthesis, as after the aggregation of sum by (x) (...).
func aggregationClause(rest string) bool {
	for _, w := range []string{"by", "without"} {
		if after, ok := strings.CutPrefix(rest, w); ok && strings.HasPrefix(strings.TrimLeft(after, " \t\n"), "(") {
			return true
		}
	}
	return false
}

func TestPromQLMetrics(t *testing.T) {
	for expr, want := range map[string][]string{
		`haraqa_topics`: {"haraqa_topics"},
		`sum by (instance) (rate(haraqa_requests_total{job="x", topic=~"$topic"}[$__rate_interval]))`:               {"haraqa_requests_total"},
		`histogram_quantile(0.99, sum by (le, op) (rate(haraqa_request_duration_seconds_bucket{op!="a"}[5m])))`:     {"haraqa_request_duration_seconds_bucket"},
		`sum(rate(a_sum[1m])) / sum without (le) (rate(a_count[1m] offset 1h30m)) > bool 0.5e3`:                     {"a_sum", "a_count"},
		`a * on (instance) group_left (pod) b or c unless ignoring(x) d and e`:                                      {"a", "b", "c", "d", "e"},
		`max(x) by (group, topic) - min(x)`:                                                                         {"x"},
		`max_over_time(deriv(y{l="by (z)"}[5m:1m])[1h:]) + count(z) + 0x1f + Inf`:                                   {"y", "z"},
		`label_join(w, "dst", ",", "a", "b")`:                                                                       {"w"},
		`sum(haraqa_replica_max_lag_bytes{instance=~"${instance}"}) * 8 + sum(haraqa_replica_max_lag_messages) % 2`: {"haraqa_replica_max_lag_bytes", "haraqa_replica_max_lag_messages"},
	} {
		got, err := promqlMetrics(expr)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("%s: %q %v, want %q", expr, got, err, want)
		}
	}
	for _, expr := range []string{`{__name__="haraqa_topics"}`, `sum(x{a="b)`, `rate(x[5m)`} {
		if got, err := promqlMetrics(expr); err == nil {
			t.Errorf("%s: %q, want an error", expr, got)
		}
	}
}

// exportedNames returns the series names a /metrics exposition (the text
// format) can hold, from its # TYPE lines: a counter's, gauge's or
// untyped family's own name (a counter's ends in _total), a histogram's
// name_bucket, name_sum and name_count, a summary's name, name_sum and
// name_count. Every sample must be of a family so declared.
func exportedNames(text string) (map[string]bool, error) {
	names := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(nil, 1<<20)
	var samples []string
	for sc.Scan() {
		line := sc.Text()
		if f := strings.Fields(line); len(f) == 4 && f[0] == "#" && f[1] == "TYPE" {
			name := f[2]
			switch f[3] {
			case "counter", "gauge", "untyped":
				names[name] = true
			case "histogram":
				names[name+"_bucket"], names[name+"_sum"], names[name+"_count"] = true, true, true
			case "summary":
				names[name], names[name+"_sum"], names[name+"_count"] = true, true, true
			default:
				return nil, fmt.Errorf("family %s of type %q", name, f[3])
			}
			continue
		}
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		end := strings.IndexAny(line, "{ ")
		if end <= 0 {
			return nil, fmt.Errorf("sample line %q", line)
		}
		samples = append(samples, line[:end])
	}
	for _, s := range samples {
		if !names[s] {
			return nil, fmt.Errorf("sample %s of no family declared by a # TYPE line", s)
		}
	}
	if len(samples) == 0 {
		return nil, fmt.Errorf("no samples")
	}
	return names, sc.Err()
}

// checkDashboard returns what is wrong with d against the series names
// the servers export: a query that does not parse, a metric no server
// exports, and a metric of required the dashboard does not use.
func checkDashboard(d *dashboard, exported map[string]bool, required []string) []string {
	var problems []string
	qs, err := d.queries()
	if err != nil {
		problems = append(problems, err.Error())
	}
	used := map[string]bool{}
	for _, q := range qs {
		names, err := promqlMetrics(q.expr)
		if err != nil {
			problems = append(problems, q.where+": "+err.Error())
			continue
		}
		if len(names) == 0 {
			problems = append(problems, fmt.Sprintf("%s: %q names no metric", q.where, q.expr))
		}
		for _, n := range names {
			used[n] = true
			if !exported[n] {
				problems = append(problems, fmt.Sprintf("%s: %s is not a metric the servers export", q.where, n))
			}
		}
	}
	for _, n := range required {
		if !used[n] {
			problems = append(problems, fmt.Sprintf("no panel shows %s", n))
		}
	}
	return problems
}

// dashboardRequired are the metrics the dashboard must show: throughput,
// latency, consumer group lag and replication.
var dashboardRequired = []string{
	"haraqa_produced_messages_total", "haraqa_consumed_messages_total",
	"haraqa_request_duration_seconds_bucket", "haraqa_http_request_duration_seconds_bucket", "haraqa_fsync_duration_seconds_bucket",
	"haraqa_consumer_group_lag_messages",
	"haraqa_replica_leader_changes_total", "haraqa_replica_isr_changes_total", "haraqa_replica_insync_min",
	"haraqa_replica_under_replicated_topics", "haraqa_replica_topics_led", "haraqa_replica_max_lag_messages",
	"haraqa_replica_max_lag_bytes", "haraqa_replica_truncations_total", "haraqa_replica_fetched_bytes_total",
	"haraqa_replicated_bytes_total", "haraqa_replica_read_bytes_total",
	"haraqa_topic_replica_lag_messages", "haraqa_topic_replica_lag_bytes",
}

func loadDashboard(t *testing.T) *dashboard {
	t.Helper()
	data, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	if d.UID == "" || d.Title == "" || len(d.Panels) == 0 {
		t.Fatalf("%s: uid %q, title %q, %d panels", dashboardFile, d.UID, d.Title, len(d.Panels))
	}
	return &d
}

// scrape asks each server of addrs (HTTP host:port) for /metrics with
// token until the union of their series names holds every name of want,
// and returns that union. A snapshot of /metrics is served for a while
// after it is taken, so a family made just now may be missing at first.
func scrape(t *testing.T, addrs []string, token string, want []string, log func() string) map[string]bool {
	t.Helper()
	deadline := time.Now().Add(ioTimeout)
	for {
		exported := map[string]bool{}
		for _, a := range addrs {
			text := get(t, a, "/metrics", token, 200, log)
			names, err := exportedNames(text)
			if err != nil {
				t.Fatalf("%s/metrics: %v\n%.2000s", a, err, text)
			}
			for n := range names {
				exported[n] = true
			}
		}
		missing := slices.DeleteFunc(slices.Clone(want), func(n string) bool { return exported[n] })
		if len(missing) == 0 {
			return exported
		}
		if time.Now().After(deadline) {
			t.Fatalf("%v do not export %v within %v\n%s", addrs, missing, ioTimeout, log())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// groupFamilies are the consumer group families of /metrics.
var groupFamilies = []string{"haraqa_consumer_group_lag_messages", "haraqa_consumer_group_committed_offset"}

// TestGrafanaDashboard checks every metric the dashboard's queries name
// against what real servers export: the chart's default cluster run on
// loopback (startPods; the plain manifests' is the same with TLS) and a
// single server (the chart with replicas 1),
// each with a topic produced to, read and committed by a consumer group,
// so that the per-topic, per-group and replication families are there
// (the replication ones only a cluster's members export,
// haraqa_replica_insync_min only the leader of a topic). The names are
// the union of every server's /metrics # TYPE lines. The consumer group
// families come from the single server: a cluster's members do not export
// them for a replicated topic, whose groups the Raft group holds
// (service.GroupStats reads the store's); the test logs it while that
// lasts. Then a misspelt copy of the dashboard must fail the same check.
func TestGrafanaDashboard(t *testing.T) {
	d := loadDashboard(t)
	s := haraqa(t)
	ctx := t.Context()

	o, _, err := render(t, "haraqa", "")
	if err != nil {
		t.Fatal(err)
	}
	ps := startPods(t, s, o.statefulSets[0], generatedAuth(t, o, "haraqa-auth", "cluster-token"))
	ps.exercise(t, 3)
	c := ps.dial(t, ps.addrs())
	if err := c.CommitOffset(ctx, "dashboard", "deploy", 1); err != nil {
		t.Fatalf("commit: %v\n%s", err, ps.log())
	}
	var webs []string
	for _, p := range ps.list {
		webs = append(webs, p.r.http)
	}
	exported := scrape(t, webs, ps.token, []string{"haraqa_replica_insync_min", "haraqa_replica_fetched_bytes_total",
		"haraqa_produced_messages_total", "haraqa_http_request_duration_seconds_bucket"}, ps.log)
	if missing := slices.DeleteFunc(slices.Clone(groupFamilies), func(n string) bool { return exported[n] }); len(missing) > 0 {
		t.Errorf("the cluster exports no %v for its replicated topic's committed group (its leader has it, in the Raft group)", missing)
	}
	ps.stop(t)

	one := s.start(t, nil, []string{t.TempDir()})
	get(t, one.http, "/readyz", "", 200, one.log)
	oc, err := client.Dial(ctx, one.tcp)
	if err != nil {
		t.Fatal(err)
	}
	defer oc.Close()
	if _, err := oc.Produce(ctx, "deploy", []byte("hello"), []byte("server")); err != nil {
		t.Fatalf("produce: %v\n%s", err, one.log())
	}
	if _, err := oc.Consume(ctx, "deploy", 0, 2); err != nil {
		t.Fatalf("consume: %v\n%s", err, one.log())
	}
	if err := oc.CommitOffset(ctx, "dashboard", "deploy", 1); err != nil {
		t.Fatalf("commit: %v\n%s", err, one.log())
	}
	for n := range scrape(t, []string{one.http}, "", append(slices.Clone(groupFamilies), "haraqa_consumed_messages_total"), one.log) {
		exported[n] = true
	}
	one.stop(t)

	if problems := checkDashboard(d, exported, dashboardRequired); len(problems) > 0 {
		var list []string
		for n := range exported {
			list = append(list, n)
		}
		sort.Strings(list)
		t.Errorf("%s:\n  %s\nthe servers export: %s", dashboardFile, strings.Join(problems, "\n  "), strings.Join(list, " "))
	}

	// The check fails a misspelt metric, and one no panel shows.
	bad := loadDashboard(t)
	var target *string
	for i := range bad.Panels {
		if p := &bad.Panels[i]; len(p.Targets) > 0 && strings.Contains(p.Targets[0].Expr, "haraqa_replica_max_lag_bytes") {
			target = &p.Targets[0].Expr
		}
	}
	if target == nil {
		t.Fatal("no panel queries haraqa_replica_max_lag_bytes")
	}
	*target = strings.Replace(*target, "haraqa_replica_max_lag_bytes", "haraqa_replica_max_lag_byte", 1)
	problems := strings.Join(checkDashboard(bad, exported, dashboardRequired), "\n")
	if !strings.Contains(problems, "haraqa_replica_max_lag_byte is not a metric") || !strings.Contains(problems, "no panel shows haraqa_replica_max_lag_bytes") {
		t.Errorf("a misspelt metric passed the check:\n%s", problems)
	}
}
