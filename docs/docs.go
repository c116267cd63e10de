// Package docs serves haraqa's HTTP API documentation under /docs/, with
// no network needed: the OpenAPI spec (openapi.yaml), the binary protocol
// (protocol.md), and two renderings of the spec, Redoc and Swagger UI,
// whose scripts and styles are embedded in the binary (assets/, each
// folder with its package's license and version).
//
// The pages load nothing from another host: they use the system's fonts and
// the embedded assets only, and every answer carries a Content-Security-
// Policy that limits the browser to this server. Redoc draws a vendor logo
// from a remote address; the policy is what keeps the browser from asking
// for it.
//
// Handler serves:
//
//	GET /docs/              index: links to the pages below
//	GET /docs/redocs        the spec rendered by Redoc
//	GET /docs/swagger       the spec rendered by Swagger UI
//	GET /docs/openapi.yaml  the spec (application/yaml)
//	GET /docs/protocol.md   the binary protocol (text/markdown)
//	GET /docs/assets/...    the embedded Redoc and Swagger UI files
//	GET /docs               redirect to /docs/
//	GET /docs/redocs/       redirect to /docs/redocs (and swagger/)
//
// Every answer is prepared once: compressed with gzip for a client that
// accepts it (Vary: Accept-Encoding, an ETag of its own), with an ETag
// and Cache-Control (an hour for the assets, revalidation for the pages).
//
// HEAD is answered like GET; any other method gets 405 and any other path
// 404, with the HTTP port's error convention: the header X-Errors and the
// message as a text/plain body.
package docs

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io/fs"
	"net/http"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/klauspost/compress/gzip"
)

//go:embed openapi.yaml protocol.md assets pages
var files embed.FS

// The pages (pages/*.html). Every URL in them is relative, so they also
// work when the handler is mounted behind a proxy under another prefix,
// and none names another host. The fonts are the system's: Swagger UI's
// stylesheet names system fonts only, and the Redoc page sets Redoc's font
// variables. The Redoc and Swagger UI pages' inline scripts, their set-ups,
// are pages/*-setup.js, put in place of {{setup}}; the
// Content-Security-Policy allows each by its hash. The Swagger set-up's
// validatorUrl null keeps Swagger UI from sending the spec to a remote
// validator.

// Prefix is the URL path Handler serves under.
const Prefix = "/docs/"

// OpenAPI returns the OpenAPI spec of the HTTP API (openapi.yaml), in a new
// slice the caller owns.
func OpenAPI() []byte { return mustRead("openapi.yaml") }

// mustRead returns the embedded file name, in a new slice.
func mustRead(name string) []byte {
	b, err := files.ReadFile(name)
	if err != nil {
		panic("docs: " + name + " not embedded: " + err.Error()) // cannot happen: go:embed checks it at build time
	}
	return b
}

// page returns the page pages/name.html with its set-up script in place,
// and the script (the inline script's text, which its hash covers).
func page(name string) (body []byte, setup string) {
	setup = "\n" + string(mustRead("pages/"+name+"-setup.js"))
	return bytes.Replace(mustRead("pages/"+name+".html"), []byte("\n{{setup}}"), []byte(setup), 1), setup
}

// Handler returns the handler of the /docs/ pages. Mount it on "/docs/"
// (and "/docs" for the redirect); it answers only paths under /docs.
func Handler() http.Handler { return handler{site: loadSite()} }

// csp limits what the docs pages may load and connect to: this server only.
// Redoc and Swagger UI style elements inline and draw icons as data: URLs;
// the only inline scripts are the two page set-ups, allowed by their hashes.
// Swagger UI's "Try it out" sends its requests to this server (connect-src).
func csp(scriptHashes []string) string {
	return "default-src 'none'; " +
		"script-src 'self' " + strings.Join(scriptHashes, " ") + "; " +
		"style-src 'self' 'unsafe-inline'; " +
		"img-src 'self' data:; font-src 'self' data:; " +
		"connect-src 'self'; worker-src 'self' blob:; " +
		"base-uri 'none'; form-action 'none'; frame-ancestors 'self'"
}

// file is one answer of the docs handler, prepared once.
type file struct {
	body        []byte
	gzipped     []byte // body gzip-compressed, for clients that accept it; nil when it would not be smaller
	contentType string
	etag        string
	cache       string
}

type site struct {
	files map[string]*file // by URL path, "/docs/..."
	csp   string
}

var loadSite = sync.OnceValue(func() *site {
	s := &site{
		files: make(map[string]*file),
	}
	redoc, redocSetup := page("redoc")
	swagger, swaggerSetup := page("swagger")
	s.csp = csp([]string{scriptHash(redocSetup), scriptHash(swaggerSetup)})
	add := func(urlPath string, body []byte, contentType, cache string) {
		sum := sha256.Sum256(body)
		s.files[urlPath] = &file{
			body:        body,
			gzipped:     gzipped(body),
			contentType: contentType,
			etag:        `"` + hex.EncodeToString(sum[:12]) + `"`,
			cache:       cache,
		}
	}
	const html = "text/html; charset=utf-8"
	add(Prefix, mustRead("pages/index.html"), html, "no-cache")
	add(Prefix+"redocs", redoc, html, "no-cache")
	add(Prefix+"swagger", swagger, html, "no-cache")
	add(Prefix+"openapi.yaml", OpenAPI(), "application/yaml", "no-cache")
	add(Prefix+"protocol.md", mustRead("protocol.md"), "text/markdown; charset=utf-8", "no-cache")
	err := fs.WalkDir(files, "assets", func(name string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := files.ReadFile(name)
		if err != nil {
			return err
		}
		// The asset files change only with the binary; the ETag lets a
		// browser keep them across restarts and revalidate after an hour.
		add(Prefix+name, b, assetType(name), "public, max-age=3600")
		return nil
	})
	if err != nil {
		panic("docs: reading embedded assets: " + err.Error()) // cannot happen: the FS is in the binary
	}
	return s
})

// gzipped returns b compressed once at start-up (the Redoc script, 2.3 MB,
// to 0.65 MB), or nil if that saves nothing.
func gzipped(b []byte) []byte {
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return nil
	}
	if _, err := zw.Write(b); err != nil || zw.Close() != nil || buf.Len() >= len(b) {
		return nil
	}
	return buf.Bytes()
}

// acceptsGzip reports whether the request's Accept-Encoding allows gzip.
func acceptsGzip(r *http.Request) bool {
	for part := range strings.SplitSeq(r.Header.Get("Accept-Encoding"), ",") {
		name, q, _ := strings.Cut(strings.TrimSpace(part), ";")
		if strings.EqualFold(strings.TrimSpace(name), "gzip") {
			return strings.TrimSpace(q) != "q=0"
		}
	}
	return false
}

// assetType is the Content-Type of an embedded asset, by its name.
func assetType(name string) string {
	switch path.Ext(name) {
	case ".js":
		return "text/javascript; charset=utf-8"
	case ".css":
		return "text/css; charset=utf-8"
	case ".md":
		return "text/markdown; charset=utf-8"
	default: // LICENSE, NOTICE, *.LICENSE.txt
		return "text/plain; charset=utf-8"
	}
}

func scriptHash(script string) string {
	sum := sha256.Sum256([]byte(script))
	return "'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'"
}

type handler struct{ site *site }

func (h handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Path
	if p == strings.TrimSuffix(Prefix, "/") {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			methodNotAllowed(w)
			return
		}
		target := Prefix
		if r.URL.RawQuery != "" {
			target += "?" + r.URL.RawQuery
		}
		http.Redirect(w, r, target, http.StatusMovedPermanently)
		return
	}
	f, ok := h.site.files[p]
	if !ok && strings.HasSuffix(p, "/") && p != Prefix {
		if _, page := h.site.files[strings.TrimSuffix(p, "/")]; page {
			// /docs/redocs/ is /docs/redocs: the pages' relative asset
			// paths need the address without the slash.
			http.Redirect(w, r, strings.TrimSuffix(p, "/"), http.StatusMovedPermanently)
			return
		}
	}
	if !ok {
		if len(p) > 200 {
			p = p[:200] + "..." // the path is echoed in a header: keep it short
		}
		httpError(w, http.StatusNotFound, "not found: "+p)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		methodNotAllowed(w)
		return
	}
	hdr := w.Header()
	hdr.Set("Content-Type", f.contentType)
	hdr.Set("Cache-Control", f.cache)
	hdr.Set("ETag", f.etag)
	hdr.Set("X-Content-Type-Options", "nosniff")
	hdr.Set("Referrer-Policy", "no-referrer")
	hdr.Set("Content-Security-Policy", h.site.csp)
	body := f.body
	if f.gzipped != nil {
		hdr.Set("Vary", "Accept-Encoding")
		if acceptsGzip(r) {
			body = f.gzipped
			hdr.Set("Content-Encoding", "gzip")
			hdr.Set("ETag", strings.TrimSuffix(f.etag, `"`)+`-gz"`) // another representation
		}
	}
	// ServeContent answers HEAD, Range and If-None-Match (against the ETag).
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(body))
}

func methodNotAllowed(w http.ResponseWriter) {
	w.Header().Set("Allow", "GET, HEAD")
	httpError(w, http.StatusMethodNotAllowed, "method not allowed: the docs answer GET and HEAD")
}

// httpError answers with the HTTP port's error convention: the status, the
// message in X-Errors and as the body.
func httpError(w http.ResponseWriter, status int, msg string) {
	msg = strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f {
			return ' '
		}
		return r
	}, msg)
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Errors", msg)
	w.WriteHeader(status)
	_, _ = fmt.Fprintln(w, msg)
}
