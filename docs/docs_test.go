package docs

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/klauspost/compress/gzip"
)

func get(t *testing.T, h http.Handler, method, target string, hdr ...string) *http.Response {
	t.Helper()
	req := httptest.NewRequest(method, target, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Result()
}

func body(t *testing.T, resp *http.Response) []byte {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func embedded(t *testing.T, name string) []byte {
	t.Helper()
	b, err := files.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// assetNames lists the embedded asset files, e.g. "assets/redoc/LICENSE".
func assetNames(t *testing.T) []string {
	t.Helper()
	var names []string
	err := fs.WalkDir(files, "assets", func(name string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			names = append(names, name)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return names
}

func TestHandlerPages(t *testing.T) {
	h := Handler()
	htmlType := "text/html; charset=utf-8"
	tests := []struct {
		path, contentType string
		want              []byte // nil: check the type and that there is a body
	}{
		{"/docs/", htmlType, nil},
		{"/docs/redocs", htmlType, nil},
		{"/docs/swagger", htmlType, nil},
		{"/docs/openapi.yaml", "application/yaml", embedded(t, "openapi.yaml")},
		{"/docs/protocol.md", "text/markdown; charset=utf-8", embedded(t, "protocol.md")},
		{"/docs/assets/redoc/redoc.standalone.js", "text/javascript; charset=utf-8", embedded(t, "assets/redoc/redoc.standalone.js")},
		{"/docs/assets/redoc/LICENSE", "text/plain; charset=utf-8", embedded(t, "assets/redoc/LICENSE")},
		{"/docs/assets/swagger-ui/swagger-ui-bundle.js", "text/javascript; charset=utf-8", embedded(t, "assets/swagger-ui/swagger-ui-bundle.js")},
		{"/docs/assets/swagger-ui/swagger-ui.css", "text/css; charset=utf-8", embedded(t, "assets/swagger-ui/swagger-ui.css")},
		{"/docs/assets/swagger-ui/LICENSE", "text/plain; charset=utf-8", embedded(t, "assets/swagger-ui/LICENSE")},
		{"/docs/assets/swagger-ui/README.md", "text/markdown; charset=utf-8", embedded(t, "assets/swagger-ui/README.md")},
	}
	for _, tt := range tests {
		resp := get(t, h, http.MethodGet, tt.path)
		b := body(t, resp)
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s: %d %q", tt.path, resp.StatusCode, b)
			continue
		}
		if ct := resp.Header.Get("Content-Type"); ct != tt.contentType {
			t.Errorf("GET %s: Content-Type %q, want %q", tt.path, ct, tt.contentType)
		}
		if len(b) == 0 || (tt.want != nil && !bytes.Equal(b, tt.want)) {
			t.Errorf("GET %s: %d bytes, not the embedded file", tt.path, len(b))
		}
		if resp.Header.Get("Content-Security-Policy") == "" || resp.Header.Get("ETag") == "" ||
			resp.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("GET %s: missing headers: %v", tt.path, resp.Header)
		}
		if strings.HasPrefix(tt.contentType, "text/html") && !bytes.Contains(b, []byte("<title>haraqa HTTP API</title>")) {
			t.Errorf("GET %s: no title", tt.path)
		}

		head := get(t, h, http.MethodHead, tt.path)
		if hb := body(t, head); head.StatusCode != http.StatusOK || len(hb) != 0 ||
			head.Header.Get("Content-Length") != resp.Header.Get("Content-Length") {
			t.Errorf("HEAD %s: %d, %d body bytes, Content-Length %q (GET: %q)", tt.path,
				head.StatusCode, len(hb), head.Header.Get("Content-Length"), resp.Header.Get("Content-Length"))
		}

		again := get(t, h, http.MethodGet, tt.path, "If-None-Match", resp.Header.Get("ETag"))
		if again.StatusCode != http.StatusNotModified {
			t.Errorf("GET %s with its ETag: %d, want 304", tt.path, again.StatusCode)
		}
	}

	// Every embedded asset is served, and nothing else under assets/.
	for _, name := range assetNames(t) {
		if resp := get(t, h, http.MethodGet, "/docs/"+name); resp.StatusCode != http.StatusOK {
			t.Errorf("GET /docs/%s: %d", name, resp.StatusCode)
		}
	}
}

func TestHandlerIndexLinks(t *testing.T) {
	b := body(t, get(t, Handler(), http.MethodGet, "/docs/"))
	for _, link := range []string{`href="redocs"`, `href="swagger"`, `href="openapi.yaml"`, `href="protocol.md"`} {
		if !bytes.Contains(b, []byte(link)) {
			t.Errorf("index has no %s", link)
		}
	}
}

func TestHandlerErrors(t *testing.T) {
	h := Handler()
	for _, p := range []string{
		"/docs/nope", "/docs/index.html", "/docs/assets/", "/docs/assets/redoc",
		"/docs/assets/redoc/", "/docs/assets/redoc/missing.js", "/docs/docs.go", "/docs/OPENAPI.yaml",
		"/docs/assets/swagger-ui/swagger-ui.css.map", "/other",
	} {
		resp := get(t, h, http.MethodGet, p)
		b := body(t, resp)
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("GET %s: %d, want 404", p, resp.StatusCode)
			continue
		}
		if msg := resp.Header.Get("X-Errors"); msg == "" || string(b) != msg+"\n" ||
			resp.Header.Get("Content-Type") != "text/plain; charset=utf-8" {
			t.Errorf("GET %s: X-Errors %q, body %q, type %q", p, msg, b, resp.Header.Get("Content-Type"))
		}
	}
	for _, m := range []string{http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch, http.MethodOptions} {
		for _, p := range []string{"/docs/", "/docs/redocs", "/docs/openapi.yaml", "/docs/assets/redoc/LICENSE", "/docs"} {
			resp := get(t, h, m, p)
			if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "GET, HEAD" ||
				resp.Header.Get("X-Errors") == "" {
				t.Errorf("%s %s: %d, Allow %q, X-Errors %q", m, p, resp.StatusCode,
					resp.Header.Get("Allow"), resp.Header.Get("X-Errors"))
			}
		}
	}
	// A long path is cut short in the message.
	resp := get(t, h, http.MethodGet, "/docs/"+strings.Repeat("x", 5000))
	if msg := resp.Header.Get("X-Errors"); resp.StatusCode != http.StatusNotFound || len(msg) > 300 {
		t.Errorf("GET of a 5000-byte path: %d, %d-byte X-Errors", resp.StatusCode, len(msg))
	}
	// A control character in the path does not split the X-Errors header.
	resp = get(t, h, http.MethodGet, "/docs/a%0Ab")
	if msg := resp.Header.Get("X-Errors"); resp.StatusCode != http.StatusNotFound || strings.ContainsAny(msg, "\r\n") {
		t.Errorf("GET /docs/a%%0Ab: %d, X-Errors %q", resp.StatusCode, msg)
	}
}

func TestHandlerRedirect(t *testing.T) {
	for target, want := range map[string]string{"/docs": "/docs/", "/docs?x=1": "/docs/?x=1"} {
		resp := get(t, Handler(), http.MethodGet, target)
		if resp.StatusCode != http.StatusMovedPermanently || resp.Header.Get("Location") != want {
			t.Errorf("GET %s: %d, Location %q, want 301 to %s", target, resp.StatusCode, resp.Header.Get("Location"), want)
		}
	}
}

// The pages name no other host, every page's own URLs resolve to files the
// handler serves, and the Content-Security-Policy allows this server only
// and exactly the pages' inline scripts.
func TestPagesOffline(t *testing.T) {
	h := Handler()
	// Any URL that leaves this server: a scheme or a protocol-relative "//".
	remote := regexp.MustCompile(`(?i)(?:src|href|action|srcset|spec-url)\s*=\s*["']?\s*(?:[a-z][a-z0-9+.-]*:)?//|url\(\s*["']?\s*(?:[a-z][a-z0-9+.-]*:)?//|@import|\bfrom\s+["'](?:[a-z][a-z0-9+.-]*:)?//|fetch\(\s*["'](?:[a-z][a-z0-9+.-]*:)?//`)
	attr := regexp.MustCompile(`(?i)\b(?:src|href)\s*=\s*"([^"]*)"`)
	moduleImport := regexp.MustCompile(`\bfrom\s+"([^"]+)"`)
	specURL := regexp.MustCompile(`(?:url:\s*|init\()\s*"([^"]+)"`)
	inline := regexp.MustCompile(`(?s)<script(?:\s+type="module")?>(.*?)</script>`)

	csp := get(t, h, http.MethodGet, "/docs/").Header.Get("Content-Security-Policy")
	checkCSP(t, csp)

	for _, page := range []string{"/docs/", "/docs/redocs", "/docs/swagger"} {
		resp := get(t, h, http.MethodGet, page)
		b := body(t, resp)
		if got := resp.Header.Get("Content-Security-Policy"); got != csp {
			t.Errorf("%s: CSP %q differs from the index's %q", page, got, csp)
		}
		if m := remote.Find(b); m != nil {
			t.Errorf("%s names another host: %q", page, m)
		}
		var refs []string
		for _, re := range []*regexp.Regexp{attr, moduleImport, specURL} {
			for _, m := range re.FindAllSubmatch(b, -1) {
				refs = append(refs, string(m[1]))
			}
		}
		base, _ := url.Parse("http://docs.test" + page)
		for _, ref := range refs {
			if strings.HasPrefix(ref, "data:") {
				continue
			}
			u, err := base.Parse(ref)
			if err != nil || u.Host != "docs.test" {
				t.Errorf("%s: %q does not stay on this server", page, ref)
				continue
			}
			if r := get(t, h, http.MethodGet, u.Path); r.StatusCode != http.StatusOK {
				t.Errorf("%s: %q resolves to %s, which answers %d", page, ref, u.Path, r.StatusCode)
			}
		}
		for _, m := range inline.FindAllSubmatch(b, -1) {
			sum := sha256.Sum256(m[1])
			if hash := "'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'"; !strings.Contains(csp, hash) {
				t.Errorf("%s: inline script %.40q... is not allowed by the CSP (%s)", page, m[1], hash)
			}
		}
		if page != "/docs/" && len(inline.FindAll(b, -1)) != 1 {
			t.Errorf("%s: %d inline scripts, want 1", page, len(inline.FindAll(b, -1)))
		}
	}

	// The stylesheets load no remote fonts or images, and the scripts name
	// none of the font and package CDNs. (The Redoc bundle's own logo
	// address is kept from the browser by the CSP; the browser test checks.)
	cdns := []string{"fonts.googleapis.com", "fonts.gstatic.com", "unpkg.com", "jsdelivr.net", "cdnjs.cloudflare.com"}
	cssRemote := regexp.MustCompile(`(?i)url\(\s*["']?\s*(?:[a-z][a-z0-9+.-]*:)?//|@import`)
	for _, name := range assetNames(t) {
		b := embedded(t, name)
		switch {
		case strings.HasSuffix(name, ".css"):
			if m := cssRemote.Find(b); m != nil {
				t.Errorf("%s loads from another host: %q", name, m)
			}
		case strings.HasSuffix(name, ".js"):
			for _, host := range cdns {
				if bytes.Contains(b, []byte(host)) {
					t.Errorf("%s names a CDN: %s", name, host)
				}
			}
		case strings.HasSuffix(name, ".map"):
			t.Errorf("%s: source maps are not shipped", name)
		}
	}
}

// checkCSP checks that every source the policy allows is this server, an
// inline script hash, or data:/blob: URLs, and that it defaults to none.
func checkCSP(t *testing.T, csp string) {
	t.Helper()
	if !strings.HasPrefix(csp, "default-src 'none';") {
		t.Errorf("CSP %q does not start with default-src 'none'", csp)
	}
	ok := regexp.MustCompile(`^(?:'self'|'none'|'unsafe-inline'|data:|blob:|'sha256-[A-Za-z0-9+/]+=*')$`)
	for _, directive := range strings.Split(csp, ";") {
		fields := strings.Fields(directive)
		if len(fields) == 0 {
			continue
		}
		if fields[0] == "script-src" && slices.Contains(fields, "'unsafe-inline'") {
			t.Errorf("CSP allows any inline script: %q", directive)
		}
		for _, src := range fields[1:] {
			if !ok.MatchString(src) {
				t.Errorf("CSP directive %q allows %q", fields[0], src)
			}
		}
	}
}

func TestOpenAPI(t *testing.T) {
	spec := OpenAPI()
	for _, want := range []string{"openapi: 3.0.3\n", "  title: haraqa HTTP API\n", "\npaths:\n", "\ncomponents:\n"} {
		if !bytes.Contains(spec, []byte(want)) {
			t.Errorf("spec has no %q", want)
		}
	}
	for _, h := range []string{"X-Sizes", "X-Id", "X-Limit", "X-Errors", "X-Oldest"} {
		if !bytes.Contains(spec, []byte("name: "+h+"\n")) && !bytes.Contains(spec, []byte("    "+h+":\n")) {
			t.Errorf("spec does not document header %s", h)
		}
	}
}

// The READMEs of the vendored packages list each file with its sha256: the
// files are the packages' own, unmodified, and nothing unlisted is shipped.
func TestAssetChecksums(t *testing.T) {
	row := regexp.MustCompile(`(?m)^\| ([^|\s]+) \|(?: [^|]+ \|)? ([0-9a-f]{64}) \|$`)
	listed := map[string]bool{}
	for _, dir := range []string{"assets/redoc", "assets/swagger-ui"} {
		readme := embedded(t, dir+"/README.md")
		rows := row.FindAllSubmatch(readme, -1)
		if len(rows) == 0 {
			t.Errorf("%s/README.md lists no files", dir)
		}
		for _, m := range rows {
			name := dir + "/" + string(m[1])
			listed[name] = true
			sum := sha256.Sum256(embedded(t, name))
			if got := fmt.Sprintf("%x", sum); got != string(m[2]) {
				t.Errorf("%s: sha256 %s, README says %s", name, got, m[2])
			}
		}
		listed[dir+"/README.md"] = true
	}
	for _, name := range assetNames(t) {
		if !listed[name] {
			t.Errorf("%s is shipped but not listed in its README", name)
		}
	}
}

// TestCompressedAndSlashes: the pages and assets come gzip-compressed to a
// client that accepts it (the Redoc script to under a third), whole to
// one that does not, and /docs/redocs/ and /docs/swagger/ lead to the pages.
func TestCompressedAndSlashes(t *testing.T) {
	hs := httptest.NewServer(Handler())
	defer hs.Close()
	tr := &http.Transport{DisableCompression: true} // see the encoding as sent
	defer tr.CloseIdleConnections()
	get := func(path, enc string) (*http.Response, []byte) {
		t.Helper()
		req, _ := http.NewRequest("GET", hs.URL+path, nil)
		if enc != "" {
			req.Header.Set("Accept-Encoding", enc)
		}
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp, b
	}
	const asset = "/docs/assets/redoc/redoc.standalone.js"
	plainResp, plain := get(asset, "")
	gzResp, gz := get(asset, "gzip, deflate")
	if plainResp.Header.Get("Content-Encoding") != "" || gzResp.Header.Get("Content-Encoding") != "gzip" {
		t.Fatalf("encodings %q and %q, want none and gzip", plainResp.Header.Get("Content-Encoding"), gzResp.Header.Get("Content-Encoding"))
	}
	if gzResp.Header.Get("Vary") != "Accept-Encoding" || gzResp.Header.Get("ETag") == plainResp.Header.Get("ETag") ||
		!strings.Contains(gzResp.Header.Get("Cache-Control"), "max-age") {
		t.Fatalf("gzip answer headers %v", gzResp.Header)
	}
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		t.Fatal(err)
	}
	unzipped, err := io.ReadAll(zr)
	if err != nil || !bytes.Equal(unzipped, plain) {
		t.Fatalf("the gzip answer does not decompress to the asset: %v", err)
	}
	if len(gz)*3 > len(plain) {
		t.Errorf("%s: %d bytes compressed from %d", asset, len(gz), len(plain))
	}
	if resp, _ := get(asset, "gzip;q=0"); resp.Header.Get("Content-Encoding") != "" {
		t.Error("gzip sent to a client that refused it with q=0")
	}
	for _, p := range []string{"/docs/redocs/", "/docs/swagger/"} {
		resp, _ := get(p, "")
		if resp.StatusCode != http.StatusMovedPermanently || resp.Header.Get("Location") != strings.TrimSuffix(p, "/") {
			t.Errorf("GET %s: %d to %q, want 301 to the page", p, resp.StatusCode, resp.Header.Get("Location"))
		}
	}
	if resp, _ := get("/docs/nosuch/", ""); resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET /docs/nosuch/: %d, want 404", resp.StatusCode)
	}
}
