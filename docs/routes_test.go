package docs_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/haraqa/haraqa/broker/httpapi"
	"github.com/haraqa/haraqa/docs"
)

// specRoutes lists the operations of an OpenAPI document as "METHOD
// /path", sorted: the form of the HTTP port's http.ServeMux patterns. A
// key under a path that is neither an HTTP method nor one of the other
// keys OpenAPI 3 allows there is an error, as is a path without
// operations or a document without any.
func specRoutes(spec []byte) ([]string, error) {
	var doc struct {
		Paths map[string]map[string]yaml.Node `yaml:"paths"`
	}
	if err := yaml.Unmarshal(spec, &doc); err != nil {
		return nil, err
	}
	var routes []string
	for p, item := range doc.Paths {
		if !strings.HasPrefix(p, "/") {
			return nil, fmt.Errorf("path %q does not start with /", p)
		}
		ops := 0
		for key := range item {
			switch key {
			case "get", "put", "post", "delete", "options", "head", "patch", "trace":
				routes = append(routes, strings.ToUpper(key)+" "+p)
				ops++
			case "summary", "description", "servers", "parameters", "$ref":
			default:
				return nil, fmt.Errorf("path %s: %q is not an OpenAPI path item key", p, key)
			}
		}
		if ops == 0 {
			return nil, fmt.Errorf("path %s has no operations", p)
		}
	}
	if len(routes) == 0 {
		return nil, fmt.Errorf("no operations")
	}
	slices.Sort(routes)
	return routes, nil
}

func TestSpecRoutes(t *testing.T) {
	got, err := specRoutes([]byte("openapi: 3.0.3\npaths:\n  /b/{id}:\n    get: {}\n    delete:\n      responses: {}\n  /a:\n    post: {}\n"))
	if want := []string{"DELETE /b/{id}", "GET /b/{id}", "POST /a"}; err != nil || !slices.Equal(got, want) {
		t.Errorf("specRoutes = %q, %v; want %q", got, err, want)
	}
	for name, spec := range map[string]string{
		"no paths":        "openapi: 3.0.3\n",
		"uppercase":       "paths:\n  /a:\n    GET: {}\n",
		"no operations":   "paths:\n  /a:\n    summary: x\n",
		"repeated path":   "paths:\n  /a:\n    get: {}\n  /a:\n    put: {}\n",
		"repeated method": "paths:\n  /a:\n    get: {}\n    get: {}\n",
		"relative path":   "paths:\n  a:\n    get: {}\n",
	} {
		if got, err := specRoutes([]byte(spec)); err == nil {
			t.Errorf("%s: specRoutes = %q, want an error", name, got)
		}
	}
}

// TestRoutes checks the spec's routes and operation ids: the HTTP port's
// contract (everything but /docs, which is not in the spec).
func TestRoutes(t *testing.T) {
	got, err := specRoutes(docs.OpenAPI())
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"DELETE /cluster/members/{id}",
		"DELETE /topics/{topic}",
		"GET /cluster",
		"GET /healthz",
		"GET /metrics",
		"GET /readyz",
		"GET /topics",
		"GET /topics/{topic}",
		"GET /topics/{topic}/info",
		"GET /ws/topics",
		"PATCH /topics/{topic}",
		"POST /cluster/members",
		"POST /topics/{topic}",
		"PUT /topics/{topic}",
	}
	if !slices.Equal(got, want) {
		t.Errorf("spec routes = %q\nwant %q", got, want)
	}
	spec := string(docs.OpenAPI())
	if n := strings.Count(spec, "\n      operationId: "); n != len(got) {
		t.Errorf("%d operationIds for %d routes", n, len(got))
	}
	for _, id := range []string{"listTopics", "createTopic", "deleteTopic", "topicInfo", "truncateTopic", "produce", "consume", "healthz", "readyz", "metrics", "clusterStatus", "addMember", "removeMember"} {
		if !strings.Contains(spec, "\n      operationId: "+id+"\n") {
			t.Errorf("no operationId %s", id)
		}
	}
}

// TestRoutesMatchOpenAPI checks that the HTTP port's router serves exactly
// the routes openapi.yaml documents.
func TestRoutesMatchOpenAPI(t *testing.T) {
	spec, err := specRoutes(docs.OpenAPI())
	if err != nil {
		t.Fatal(err)
	}
	routes := httpapi.New(httpapi.DefaultConfig()).Routes()
	slices.Sort(routes)
	if !slices.Equal(routes, spec) {
		t.Fatalf("router and openapi.yaml differ:\nrouter: %q\nspec:   %q", routes, spec)
	}
}
