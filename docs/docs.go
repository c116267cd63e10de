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
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"path"
	"slices"
	"strings"
	"sync"
	"time"
)

//go:embed openapi.yaml protocol.md assets
var files embed.FS

// ErrBadSpec reports an openapi.yaml whose paths section does not have the
// block-style shape Routes reads.
var ErrBadSpec = errors.New("docs: malformed openapi paths")

// Prefix is the URL path Handler serves under.
const Prefix = "/docs/"

// OpenAPI returns the OpenAPI spec of the HTTP API (openapi.yaml), in a new
// slice the caller owns.
func OpenAPI() []byte {
	b, err := files.ReadFile("openapi.yaml")
	if err != nil {
		panic("docs: openapi.yaml not embedded: " + err.Error()) // cannot happen: go:embed checks it at build time
	}
	return b
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
		csp:   csp([]string{scriptHash(redocSetup), scriptHash(swaggerSetup)}),
	}
	add := func(urlPath string, body []byte, contentType, cache string) {
		sum := sha256.Sum256(body)
		s.files[urlPath] = &file{
			body:        body,
			contentType: contentType,
			etag:        `"` + hex.EncodeToString(sum[:12]) + `"`,
			cache:       cache,
		}
	}
	const html = "text/html; charset=utf-8"
	add(Prefix, []byte(indexPage), html, "no-cache")
	add(Prefix+"redocs", []byte(redocPage), html, "no-cache")
	add(Prefix+"swagger", []byte(swaggerPage), html, "no-cache")
	add(Prefix+"openapi.yaml", OpenAPI(), "application/yaml", "no-cache")
	md, err := files.ReadFile("protocol.md")
	if err != nil {
		panic("docs: protocol.md not embedded: " + err.Error()) // cannot happen: go:embed checks it at build time
	}
	add(Prefix+"protocol.md", md, "text/markdown; charset=utf-8", "no-cache")
	err = fs.WalkDir(files, "assets", func(name string, d fs.DirEntry, err error) error {
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
	// ServeContent answers HEAD, Range and If-None-Match (against the ETag).
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(f.body))
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

// Routes lists the operations of the embedded spec as "METHOD /path",
// sorted, e.g. "GET /topics/{topic}/info": the same form as the HTTP
// port's http.ServeMux patterns, so a test can compare the two.
func Routes() ([]string, error) { return parseRoutes(OpenAPI()) }

// httpMethods are the operation keys OpenAPI allows under a path.
var httpMethods = []string{"get", "put", "post", "delete", "options", "head", "patch", "trace"}

// parseRoutes reads the paths section of an OpenAPI document written in
// plain block style:
//
//	paths:
//	  /topics/{topic}:
//	    get:
//	      ...
//
// A path is a key at 2 spaces, its operations are lowercase HTTP methods at
// 4 spaces; anything else at those indents, a path without operations, or a
// repeated path or method is ErrBadSpec. The section ends at the next line
// that is not indented.
func parseRoutes(spec []byte) ([]string, error) {
	lines := strings.Split(string(spec), "\n")
	start := slices.IndexFunc(lines, func(l string) bool { return strings.TrimRight(l, " \r") == "paths:" })
	if start < 0 {
		return nil, fmt.Errorf("%w: no top-level \"paths:\" line", ErrBadSpec)
	}
	var (
		routes  []string
		seen    = make(map[string]bool)
		current string // the path whose operations follow
		ops     int    // operations seen under current
	)
	endPath := func(line int) error {
		if current != "" && ops == 0 {
			return fmt.Errorf("%w: line %d: path %s has no operations", ErrBadSpec, line, current)
		}
		return nil
	}
	for i := start + 1; i < len(lines); i++ {
		n := i + 1 // 1-based line number in messages
		l := strings.TrimRight(lines[i], " \r")
		trimmed := strings.TrimLeft(l, " ")
		if trimmed == "" || strings.HasPrefix(trimmed, "#") {
			continue
		}
		if strings.HasPrefix(trimmed, "\t") {
			return nil, fmt.Errorf("%w: line %d: tab indentation", ErrBadSpec, n)
		}
		indent := len(l) - len(trimmed)
		switch {
		case indent == 0: // the next top-level key: the section is over
			if err := endPath(n); err != nil {
				return nil, err
			}
			return finish(routes)
		case indent == 2:
			if err := endPath(n); err != nil {
				return nil, err
			}
			p, ok := strings.CutSuffix(trimmed, ":")
			if !ok || !validPath(p) {
				return nil, fmt.Errorf("%w: line %d: %q is not a path key like \"/topics:\"", ErrBadSpec, n, trimmed)
			}
			if seen[p] {
				return nil, fmt.Errorf("%w: line %d: path %s repeated", ErrBadSpec, n, p)
			}
			seen[p] = true
			current, ops = p, 0
		case indent == 4:
			m, ok := strings.CutSuffix(trimmed, ":")
			if !ok || !slices.Contains(httpMethods, m) {
				return nil, fmt.Errorf("%w: line %d: %q is not a lowercase HTTP method key like \"get:\"", ErrBadSpec, n, trimmed)
			}
			if current == "" {
				return nil, fmt.Errorf("%w: line %d: method %s before any path", ErrBadSpec, n, m)
			}
			route := strings.ToUpper(m) + " " + current
			if seen[route] {
				return nil, fmt.Errorf("%w: line %d: %s repeated", ErrBadSpec, n, route)
			}
			seen[route] = true
			routes = append(routes, route)
			ops++
		case indent < 4: // 1 or 3 spaces
			return nil, fmt.Errorf("%w: line %d: indented by %d spaces, want 2 (path) or 4 (method)", ErrBadSpec, n, indent)
		case current == "":
			return nil, fmt.Errorf("%w: line %d: indented line before any path", ErrBadSpec, n)
		}
		// Deeper lines belong to an operation.
	}
	if err := endPath(len(lines)); err != nil {
		return nil, err
	}
	return finish(routes)
}

// validPath reports whether p can be a path key of the block-style spec:
// it starts with "/" and has no spaces, control characters, quotes or "#".
func validPath(p string) bool {
	if !strings.HasPrefix(p, "/") {
		return false
	}
	for i := 0; i < len(p); i++ {
		if c := p[i]; c <= ' ' || c == 0x7f || c == '"' || c == '\'' || c == '#' {
			return false
		}
	}
	return true
}

func finish(routes []string) ([]string, error) {
	if len(routes) == 0 {
		return nil, fmt.Errorf("%w: no operations", ErrBadSpec)
	}
	slices.Sort(routes)
	return routes, nil
}

// The pages. Every URL in them is relative, so they also work when the
// handler is mounted behind a proxy under another prefix, and none names
// another host. The fonts are the system's: Swagger UI's stylesheet names
// system fonts only, and the Redoc page sets Redoc's font variables.

const indexPage = `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>haraqa HTTP API</title>
<link rel="icon" href="data:,">
<style>
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, Ubuntu, Cantarell, "Noto Sans", Arial, sans-serif; max-width: 44rem; margin: 2rem auto; padding: 0 1rem; line-height: 1.5; color: #1b1f24; }
a { color: #0a58ca; }
li { margin: .3rem 0; }
</style>
</head>
<body>
<h1>haraqa HTTP API</h1>
<p>haraqa is a persistent message queue: producers append messages to named
topics, which are stored on one or more volumes, and consumers read them back
by offset. This server answers on its HTTP port, documented here, and on a
binary TCP port for high-throughput clients.</p>
<ul>
<li><a href="redocs">API reference (Redoc)</a></li>
<li><a href="swagger">API explorer (Swagger UI)</a>: try the requests against this server</li>
<li><a href="openapi.yaml">OpenAPI specification (openapi.yaml)</a></li>
<li><a href="protocol.md">Binary protocol (protocol.md)</a></li>
</ul>
</body>
</html>
`

// redocSetup is the Redoc page's inline script; the Content-Security-Policy
// allows it by its hash.
const redocSetup = `
import { init } from "./assets/redoc/redoc.standalone.js";
init("openapi.yaml", { disableTelemetry: true }, document.getElementById("redoc"));
`

const redocPage = `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>haraqa HTTP API</title>
<link rel="icon" href="data:,">
<style>
body { margin: 0; }
#redoc {
  --font-family-base: system-ui, -apple-system, "Segoe UI", Roboto, Ubuntu, Cantarell, "Noto Sans", Arial, sans-serif;
  --font-family-monospaced: ui-monospace, "Cascadia Mono", "DejaVu Sans Mono", Menlo, Consolas, monospace;
}
</style>
</head>
<body>
<noscript>The API reference needs JavaScript; the specification is <a href="openapi.yaml">openapi.yaml</a>.</noscript>
<div id="redoc"></div>
<script type="module">` + redocSetup + `</script>
</body>
</html>
`

// swaggerSetup is the Swagger UI page's inline script; the
// Content-Security-Policy allows it by its hash. validatorUrl null keeps
// Swagger UI from sending the spec to a remote validator.
const swaggerSetup = `
window.ui = SwaggerUIBundle({
  url: "openapi.yaml",
  dom_id: "#swagger-ui",
  deepLinking: true,
  displayOperationId: true,
  validatorUrl: null,
  presets: [SwaggerUIBundle.presets.apis],
  layout: "BaseLayout",
});
`

const swaggerPage = `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>haraqa HTTP API</title>
<link rel="icon" href="data:,">
<link rel="stylesheet" href="assets/swagger-ui/swagger-ui.css">
<style>body { margin: 0; }</style>
</head>
<body>
<noscript>The API explorer needs JavaScript; the specification is <a href="openapi.yaml">openapi.yaml</a>.</noscript>
<div id="swagger-ui"></div>
<script src="assets/swagger-ui/swagger-ui-bundle.js"></script>
<script>` + swaggerSetup + `</script>
</body>
</html>
`
