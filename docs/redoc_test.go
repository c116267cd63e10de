package docs

import (
	"bytes"
	"regexp"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// attributionRule is the Redoc page's rule that hides the vendor's
// attribution at the foot of the sidebar.
const attributionRule = `#redoc a[href^="https://redocly.com"] { display: none !important; }`

// TestRedocTitleAndAttribution checks, without a browser, what the Redoc
// page's title and sidebar are made of. Redoc titles the page "title
// (version)" from the spec's info, so info.version must read as a version,
// "v1" (the spec once said "1" and the title read "haraqa HTTP API (1)").
// The sidebar's "API docs by" label is a link to the vendor's site inside
// #redoc: the page's style must hide links there, and the embedded Redoc
// must still draw the label as such a link, or the rule hides nothing.
func TestRedocTitleAndAttribution(t *testing.T) {
	h := Handler()

	resp := get(t, h, "GET", Prefix+"openapi.yaml")
	if resp.StatusCode != 200 {
		t.Fatalf("GET %sopenapi.yaml: %d", Prefix, resp.StatusCode)
	}
	var spec struct {
		Info struct{ Title, Version string }
	}
	if err := yaml.Unmarshal(body(t, resp), &spec); err != nil {
		t.Fatal(err)
	}
	if spec.Info.Title != "haraqa HTTP API" || spec.Info.Version != "v1" {
		t.Errorf("served spec's info: title %q, version %q; want %q and %q, so Redoc's title reads %q",
			spec.Info.Title, spec.Info.Version, "haraqa HTTP API", "v1", "haraqa HTTP API (v1)")
	}

	resp = get(t, h, "GET", Prefix+"redocs")
	if resp.StatusCode != 200 {
		t.Fatalf("GET %sredocs: %d", Prefix, resp.StatusCode)
	}
	page := body(t, resp)
	head, _, ok := bytes.Cut(page, []byte("</head>"))
	style := regexp.MustCompile(`(?s)<style>(.*?)</style>`).FindSubmatch(head)
	if !ok || style == nil || !bytes.Contains(style[1], []byte(attributionRule)) {
		t.Errorf("the Redoc page's style in its head lacks %q", attributionRule)
	}
	if !bytes.Contains(page, []byte(`<div id="redoc"></div>`)) {
		t.Error(`the Redoc page has no <div id="redoc">, the rule's scope`)
	}

	// In the bundle the label is a child of the link element:
	// ...href:`https://redocly.com/redoc/`,...children:`API docs by`...
	js := string(embedded(t, "assets/redoc/redoc.standalone.js"))
	i := strings.Index(js, "`API docs by`")
	if i < 0 {
		t.Fatal("the embedded Redoc no longer draws an \"API docs by\" label: check the page by eye and update this test")
	}
	before := js[max(0, i-400):i]
	j := strings.LastIndex(before, "href:`")
	if j < 0 || !strings.HasPrefix(before[j+len("href:`"):], "https://redocly.com") {
		t.Errorf("the embedded Redoc's \"API docs by\" label is not inside a link to https://redocly.com: %q hides nothing", attributionRule)
	}
}
