package deploy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/haraqa/haraqa/client"
	"github.com/haraqa/haraqa/client/admin"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// clusterWant is what the StatefulSet of a cluster should say
// (want.cluster): the pods form one cluster, each named in -peers by its
// name under the headless Service.
type clusterWant struct {
	replicas, minInsync int    // -replicas, -min-insync
	domain              string // the cluster's DNS domain in the pods' names
	tokenKey            string // the key of the auth Secret -cluster-token-file reads ("": no tokens)
}

// testNamespace is the namespace the tests take the pods to run in: what
// $(POD_NAMESPACE) expands to, and the one the chart is rendered for.
const testNamespace = "queues"

// envRef is a reference $(NAME) in a container's args.
var envRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// podArgs returns c's args as the kubelet passes them to the pod named
// pod in namespace: every $(NAME) replaced by the value of the variable
// NAME of c's env, which must be defined (the kubelet would leave an
// undefined reference as it is). Values are plain, or the pod's name or
// namespace from the downward API.
func podArgs(c corev1.Container, pod, namespace string) ([]string, error) {
	vars := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			vars[e.Name] = e.Value
		case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name":
			vars[e.Name] = pod
		case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.namespace":
			vars[e.Name] = namespace
		default:
			return nil, fmt.Errorf("env %s: a source the tests do not know: %+v", e.Name, e.ValueFrom)
		}
	}
	var out []string
	for _, a := range c.Args {
		if strings.Contains(a, "$$") {
			return nil, fmt.Errorf("arg %q: an escaped $ the tests do not expand", a)
		}
		var undefined []string
		a = envRef.ReplaceAllStringFunc(a, func(ref string) string {
			name := envRef.FindStringSubmatch(ref)[1]
			v, ok := vars[name]
			if !ok {
				undefined = append(undefined, name)
				return ref
			}
			return v
		})
		if len(undefined) > 0 {
			return nil, fmt.Errorf("arg %q: $(%s) is not in the container's env", a, strings.Join(undefined, "), $("))
		}
		out = append(out, a)
	}
	return out, nil
}

// podHost is the name the kubelet writes into the /etc/hosts of pod
// ordinal i of sts (hostname.subdomain.namespace.svc.domain, the
// subdomain being the StatefulSet's serviceName), bound to the pod's
// address.
func podHost(sts *appsv1.StatefulSet, i int, domain string) string {
	return fmt.Sprintf("%s-%d.%s.%s.svc.%s", sts.Name, i, sts.Spec.ServiceName, testNamespace, domain)
}

// checkCluster checks a cluster's StatefulSet: every pod's args, as the
// kubelet expands them, make a cluster of -replicas and -min-insync whose
// -peers list every pod in ordinal order by its host name on the
// container's ports, and in which the pod finds itself as the server
// does. The server's rule (broker/server/cluster.go, startCluster): its
// ID is -listen and -tcp joined (net.JoinHostPort), and it is the entry
// of -peers whose host:port is spelt exactly so, no name resolved; a
// server that is in no entry refuses to start. ports are the container's
// named ports. The tests cannot resolve the pods' names; startPods runs
// the same args with the names mapped to loopback.
func checkCluster(t *testing.T, s server, sts *appsv1.StatefulSet, ports map[string]int32, w clusterWant) {
	t.Helper()
	if sts.Spec.PodManagementPolicy != appsv1.ParallelPodManagement {
		t.Errorf("podManagementPolicy %q: every member bootstraps the same Raft group and none elects a leader alone, so they start together (Parallel)",
			sts.Spec.PodManagementPolicy)
	}
	if sts.Spec.UpdateStrategy.Type != appsv1.RollingUpdateStatefulSetStrategyType {
		t.Errorf("update strategy %q, want RollingUpdate (one pod at a time)", sts.Spec.UpdateStrategy.Type)
	}
	if ru := sts.Spec.UpdateStrategy.RollingUpdate; ru != nil && ru.MaxUnavailable != nil && ru.MaxUnavailable.IntValue() != 1 {
		t.Errorf("rolling updates take %v pods down at once, want 1", ru.MaxUnavailable)
	}
	pods := int(*sts.Spec.Replicas)
	c := sts.Spec.Template.Spec.Containers[0]
	port := func(name string) string { return strconv.Itoa(int(ports[name])) }
	for i := range pods {
		args, err := podArgs(c, fmt.Sprintf("%s-%d", sts.Name, i), testNamespace)
		if err != nil {
			t.Fatalf("pod %d: %v", i, err)
		}
		set, _, err := s.parseArgs(args)
		if err != nil {
			t.Fatalf("pod %d: %v", i, err)
		}
		if set["cluster"] != "true" || set["replicas"] != strconv.Itoa(w.replicas) || set["min-insync"] != strconv.Itoa(w.minInsync) {
			t.Errorf("pod %d: -cluster %q -replicas %q -min-insync %q, want true, %d and %d",
				i, set["cluster"], set["replicas"], set["min-insync"], w.replicas, w.minInsync)
		}
		if v, ok := set["cluster-token-file"]; ok != (w.tokenKey != "") || (ok && v != "/etc/haraqa/auth/"+w.tokenKey) {
			t.Errorf("pod %d: -cluster-token-file %q, want the key %q of the auth Secret", i, v, w.tokenKey)
		}
		if cp := s.port(t, set, "cluster-port"); ports["cluster"] != cp || cp != 14355 {
			t.Errorf("pod %d: cluster port %d, container port %d, want the server's default 14355", i, cp, ports["cluster"])
		}
		self := net.JoinHostPort(set["listen"], port("tcp"))
		if host := podHost(sts, i, w.domain); set["listen"] != host {
			t.Errorf("pod %d listens on %q, want %s: its name under the headless Service, which its /etc/hosts binds to its address", i, set["listen"], host)
		}
		entries := strings.Split(set["peers"], ",")
		if len(entries) != pods {
			t.Fatalf("pod %d: -peers lists %d servers, the StatefulSet runs %d: %q", i, len(entries), pods, set["peers"])
		}
		var found []int
		for j, e := range entries {
			host := podHost(sts, j, w.domain)
			if want := net.JoinHostPort(host, port("tcp")) + "/" + port("http") + "/" + port("cluster"); e != want {
				t.Errorf("pod %d: -peers entry %d is %q, want %q (host:port/httpport/clusterport)", i, j, e, want)
			}
			if addr, _, _ := strings.Cut(e, "/"); addr == self {
				found = append(found, j)
			}
		}
		if !slices.Equal(found, []int{i}) {
			t.Errorf("pod %d (%s) finds itself at %v of -peers, want [%d]", i, self, found, i)
		}
	}
}

// lowPort returns a loopback port below the kernel's ephemeral range
// (32768 on) that was free a moment ago: the members of a cluster are
// named by their ports, which all must know before any starts and keep
// across restarts, and a port outside the ephemeral range is not taken
// meanwhile by an outgoing connection (as broker/server's cluster tests).
// It never returns a port twice in one test binary: the pods' ports are
// picked before any pod listens, so a port free now could be handed to
// two of them.
func lowPort(t *testing.T) int {
	t.Helper()
	lowPorts.Lock()
	defer lowPorts.Unlock()
	for range 1000 {
		p := 20000 + rand.IntN(12000)
		if lowPorts.given[p] {
			continue
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err == nil {
			l.Close()
			lowPorts.given[p] = true
			return p
		}
	}
	t.Fatal("no free port in 20000-31999")
	return 0
}

// lowPorts are the ports lowPort handed out.
var lowPorts = struct {
	sync.Mutex
	given map[int]bool
}{given: map[int]bool{}}

// pod is one pod of a StatefulSet run as a process on loopback.
type pod struct {
	flags          []string // its args' flags, mapped to loopback and temporary files
	vols           []string // its volumes, temporary directories
	bin, web, clus int      // its binary, HTTP and cluster ports
	r              *running
}

func (p *pod) addr() string { return fmt.Sprintf("127.0.0.1:%d", p.bin) }

// pods is a cluster's StatefulSet run on loopback.
type pods struct {
	s     server
	list  []*pod
	token string      // an admin token, "" without tokens
	pki   *testPKI    // the CA and the servers' certificate with -tls-cert, else nil
	tls   *tls.Config // a client's, trusting the CA (and presenting a client certificate under -tls-client-ca)
}

// startPods runs every pod of a cluster's StatefulSet as a server process
// on 127.0.0.1, all at once as podManagementPolicy Parallel starts them:
// each with its args as the kubelet expands them, -listen and -peers
// mapped to loopback ports (the pods' names to 127.0.0.1 and ports of
// their own, the list in the same order), the auth file and the cluster
// token written where the Secret would be mounted, and volumes of its own.
// With -tls-cert the pods share one certificate, as a cert-manager Secret
// of a wildcard would give them, for 127.0.0.1 (the name the members then
// know each other by) and certNames, from a CA of the test's: tls.crt,
// tls.key and ca.crt where the Secret is mounted. It waits until every
// member is ready and in step with the Raft group.
func startPods(t *testing.T, s server, sts *appsv1.StatefulSet, af authFile, certNames ...string) *pods {
	t.Helper()
	n := int(*sts.Spec.Replicas)
	c := sts.Spec.Template.Spec.Containers[0]
	dir := t.TempDir()
	ps := &pods{s: s}
	if set, _, err := s.parseArgs(c.Args); err == nil && set["tls-cert"] != "" {
		ps.pki = newTestPKI(t, filepath.Join(dir, "tls"), certNames...)
		_, mtls := set["tls-client-ca"]
		ps.tls = ps.pki.clientConfig(mtls)
	}
	var entries []string
	for range n {
		p := &pod{bin: lowPort(t), web: lowPort(t), clus: lowPort(t)}
		ps.list = append(ps.list, p)
		entries = append(entries, fmt.Sprintf("127.0.0.1:%d/%d/%d", p.bin, p.web, p.clus))
	}
	peers := strings.Join(entries, ",")
	for i, p := range ps.list {
		args, err := podArgs(c, fmt.Sprintf("%s-%d", sts.Name, i), testNamespace)
		if err != nil {
			t.Fatal(err)
		}
		set, vols, err := s.parseArgs(args)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := set["auth-file"]; ok {
			ps.token = af.token
		}
		p.flags = mapFlags(s, args[:len(args)-len(vols)], set, func(name, v string) string {
			switch name {
			case "auth-file":
				return writeFile(t, filepath.Join(dir, "auth"), af.file)
			case "cluster-token-file":
				return writeFile(t, filepath.Join(dir, "cluster-token"), af.clusterToken+"\n")
			case "listen":
				return "127.0.0.1"
			case "peers":
				return peers
			case "tls-cert", "tls-key", "tls-client-ca", "cluster-ca":
				return filepath.Join(ps.pki.dir, filepath.Base(v)) // tls.crt, tls.key, ca.crt as in the Secret
			}
			return v
		})
		p.flags = append(p.flags, "-cluster-port", strconv.Itoa(p.clus))
		for _, v := range vols {
			p.vols = append(p.vols, filepath.Join(dir, fmt.Sprintf("pod%d", i), v))
		}
	}
	for i := range ps.list {
		ps.start(t, i)
	}
	for i := range ps.list {
		ps.waitInStep(t, i)
	}
	return ps
}

// mapFlags returns flags (a container's args before its volumes, set
// their values as parseArgs read them) with each value of a flag that
// takes one replaced by value(name, v).
func mapFlags(s server, flags []string, set map[string]string, value func(name, v string) string) []string {
	var out []string
	for i := 0; i < len(flags); i++ {
		a := flags[i]
		out = append(out, a)
		name := strings.TrimLeft(a, "-")
		if v, ok := set[name]; ok && !s.flags[name].bool && i+1 < len(flags) && flags[i+1] == v {
			i++
			out = append(out, value(name, v))
		}
	}
	return out
}

func writeFile(t *testing.T, path, data string) string {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// start starts pod i on its ports and volumes.
func (ps *pods) start(t *testing.T, i int) {
	t.Helper()
	p := ps.list[i]
	p.r = ps.s.startOn(t, p.flags, p.vols, p.web, p.bin)
}

// log is every pod's output.
func (ps *pods) log() string {
	var b strings.Builder
	for i, p := range ps.list {
		fmt.Fprintf(&b, "--- pod %d (%s)\n%s", i, p.addr(), p.r.log())
	}
	return b.String()
}

// addrs is the list of every pod's binary address a client is given.
func (ps *pods) addrs() string {
	var a []string
	for _, p := range ps.list {
		a = append(a, p.addr())
	}
	return strings.Join(a, ",")
}

// options are a client's options for the pods: their token and TLS.
func (ps *pods) options(opts ...client.Option) []client.Option {
	if ps.token != "" {
		opts = append(opts, client.WithToken(ps.token))
	}
	if ps.tls != nil {
		opts = append(opts, client.WithTLS(ps.tls))
	}
	return opts
}

// ready waits until pod i's /readyz answers 200, over HTTPS with TLS.
func (ps *pods) ready(t *testing.T, i int) {
	t.Helper()
	hc, scheme := &http.Client{Timeout: 2 * time.Second}, "http://"
	if ps.tls != nil {
		hc.Transport = &http.Transport{TLSClientConfig: ps.tls}
		scheme = "https://"
	}
	getURL(t, hc, scheme+ps.list[i].r.http+"/readyz", "", 200, ps.log)
}

// dial connects to the servers of addr (one, or a list) with the admin
// token.
func (ps *pods) dial(t *testing.T, addr string) *client.Client {
	t.Helper()
	opts := ps.options(client.WithDialTimeout(2*time.Second), client.WithRequestTimeout(ioTimeout))
	c, err := client.Dial(t.Context(), addr, opts...)
	if err != nil {
		t.Fatalf("dial %s: %v\n%s", addr, err, ps.log())
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// status asks pod i for its cluster status.
func (ps *pods) status(ctx context.Context, i int) (admin.ClusterStatus, error) {
	c, err := client.Dial(ctx, ps.list[i].addr(), ps.options(client.WithDialTimeout(time.Second), client.WithRequestTimeout(2*time.Second))...)
	if err != nil {
		return admin.ClusterStatus{}, err
	}
	defer c.Close()
	return admin.New(c).ClusterStatus(ctx)
}

// waitFor polls until ok finds pod i's cluster status as wanted, or fails
// the test at the deadline with what ok said last.
func (ps *pods) waitFor(t *testing.T, i int, what string, ok func(admin.ClusterStatus) error) {
	t.Helper()
	deadline := time.Now().Add(ioTimeout)
	for {
		st, err := ps.status(t.Context(), i)
		if err == nil {
			err = ok(st)
		}
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod %d: not %s within %v: %v\n%s", i, what, ioTimeout, err, ps.log())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitInStep waits until pod i is ready (/readyz) and, in its cluster
// status, in step with the Raft group, which has a leader and every pod
// as a member.
func (ps *pods) waitInStep(t *testing.T, i int) {
	t.Helper()
	ps.ready(t, i)
	ps.waitFor(t, i, "in step", func(st admin.ClusterStatus) error {
		switch {
		case !st.InStep:
			return errors.New("not in step with the Raft group")
		case st.RaftLeader == "":
			return errors.New("no Raft leader")
		case len(st.Members) != len(ps.list):
			return fmt.Errorf("%d members", len(st.Members))
		}
		return nil
	})
}

// waitInSync waits until, in pod i's view, every topic has a leader and
// all its replicas in sync: what an operator checks between pods of a
// rolling upgrade (docs/deploy.md).
func (ps *pods) waitInSync(t *testing.T, i int) {
	t.Helper()
	ps.waitFor(t, i, "in sync", func(st admin.ClusterStatus) error {
		for _, tp := range st.Topics {
			if tp.Leader == "" || len(tp.ISR) != len(tp.Replicas) {
				return fmt.Errorf("topic %s: leader %q, in sync %v of %v", tp.Name, tp.Leader, tp.ISR, tp.Replicas)
			}
		}
		return nil
	})
}

// exercise creates a topic on the cluster, produces to it with acks=all
// through a client given every pod, and reads it back; then every pod
// sees the topic on replicas of the pods, all of them in sync, and each
// replica holds both messages below its high-water mark.
func (ps *pods) exercise(t *testing.T, replicas int) {
	t.Helper()
	ctx := t.Context()
	c := ps.dial(t, ps.addrs())
	deadline := time.Now().Add(ioTimeout)
	for {
		err := c.CreateTopic(ctx, "deploy")
		if err == nil || errors.Is(err, client.ErrTopicExists) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("create topic: %v\n%s", err, ps.log())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := c.Produce(ctx, "deploy", []byte("hello"), []byte("cluster")); err != nil {
		t.Fatalf("produce with acks=all: %v\n%s", err, ps.log())
	}
	msgs, err := c.Consume(ctx, "deploy", 0, 2)
	if err != nil || len(msgs) != 2 || string(msgs[0].Value) != "hello" || string(msgs[1].Value) != "cluster" {
		t.Fatalf("consume: %v %v\n%s", msgs, err, ps.log())
	}
	for i, p := range ps.list {
		ps.waitFor(t, i, "holding the topic", func(st admin.ClusterStatus) error {
			if len(st.Topics) != 1 || st.Topics[0].Name != "deploy" {
				return fmt.Errorf("topics %+v, want deploy", st.Topics)
			}
			tp := st.Topics[0]
			switch {
			case len(tp.Replicas) != replicas:
				return fmt.Errorf("deploy on %v, want %d replicas", tp.Replicas, replicas)
			case tp.Leader == "" || len(tp.ISR) != replicas:
				return fmt.Errorf("deploy led by %q, in sync %v", tp.Leader, tp.ISR)
			case slices.Contains(tp.Replicas, p.addr()) && (tp.Next != 2 || tp.HighWater != 2):
				return fmt.Errorf("a replica at %d, high-water mark %d, want 2 and 2", tp.Next, tp.HighWater)
			}
			return nil
		})
	}
}

// stop stops every pod with SIGTERM and wants clean exits.
func (ps *pods) stop(t *testing.T) {
	t.Helper()
	for _, p := range ps.list {
		p.r.stop(t)
	}
}
