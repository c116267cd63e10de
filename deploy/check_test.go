package deploy

import (
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/haraqa/haraqa/client"
	"github.com/haraqa/haraqa/protocol"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// want is what a deployment's objects should say beyond what every
// deployment must.
type want struct {
	replicas     int32
	size         string // of each PersistentVolume and the emptyDir's limit
	storageClass string // "": none set
	tls, mtls    bool
	tlsSecret    string // the Secret mounted for TLS ("": the chart's haraqa-tls)
	clusterCA    bool   // -cluster-ca is the TLS Secret's ca.crt
	authFile     bool
	flags        map[string]string // more server flags the args must set
	cluster      *clusterWant      // nil: no cluster, each server on its own
	noNetpol     bool              // no NetworkPolicy
	clients      clientPeers       // who besides the pods reaches the client ports (nil: anyone)
}

// checkObjects checks one deployment: one StatefulSet, its headless and
// client Services and a PodDisruptionBudget, all selecting its pods; the
// server's args, ports, probe paths and metrics annotations against the
// server's own; a cluster's flags, names and ports (checkCluster); the
// NetworkPolicy (checkNetworkPolicy); the volume layout and the Secrets
// mounted where the flags point; the security context. It returns the
// StatefulSet.
func checkObjects(t *testing.T, s server, o objects, w want) *appsv1.StatefulSet {
	t.Helper()
	if len(o.statefulSets) != 1 || len(o.services) != 2 || len(o.pdbs) != 1 || len(o.netpols) != 1-btoi(w.noNetpol) {
		t.Fatalf("%d StatefulSets, %d Services, %d PodDisruptionBudgets, %d NetworkPolicies; want 1, 2, 1, %d",
			len(o.statefulSets), len(o.services), len(o.pdbs), len(o.netpols), 1-btoi(w.noNetpol))
	}
	sts := o.statefulSets[0]
	pod := sts.Spec.Template
	podLabels := labels.Set(pod.Labels)
	sel, err := metav1.LabelSelectorAsSelector(sts.Spec.Selector)
	if err != nil || sel.Empty() || !sel.Matches(podLabels) {
		t.Errorf("the StatefulSet's selector %v does not select its pods %v (%v)", sts.Spec.Selector, pod.Labels, err)
	}
	if sts.Spec.Replicas == nil || *sts.Spec.Replicas != w.replicas {
		t.Errorf("replicas %v, want %d", sts.Spec.Replicas, w.replicas)
	}

	if len(pod.Spec.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(pod.Spec.Containers))
	}
	c := pod.Spec.Containers[0]
	set, vols, err := s.parseArgs(c.Args)
	if err != nil {
		t.Fatalf("args %q: %v", c.Args, err)
	}
	if len(c.Command) != 0 {
		t.Errorf("command %q: the image's entrypoint is the server", c.Command)
	}
	for name, v := range w.flags {
		if set[name] != v {
			t.Errorf("-%s is %q in the args, want %q", name, set[name], v)
		}
	}

	// Ports: the container's named ports are the server's, and the
	// Services and probes use them.
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	httpPort, tcpPort := s.port(t, set, "http"), s.port(t, set, "tcp")
	if httpPort != 4353 || tcpPort != 14353 {
		t.Errorf("the server listens on %d and %d, want the original's 4353 and 14353", httpPort, tcpPort)
	}
	if ports["http"] != httpPort || ports["tcp"] != tcpPort || len(ports) != 2+btoi(w.cluster != nil) {
		t.Errorf("container ports %v, want http %d and tcp %d", ports, httpPort, tcpPort)
	}
	if w.cluster != nil {
		if cp := s.port(t, set, "cluster-port"); ports["cluster"] != cp {
			t.Errorf("container port cluster %d, the server's cluster port %d", ports["cluster"], cp)
		}
		checkCluster(t, s, sts, ports, *w.cluster)
	} else {
		for _, f := range []string{"cluster", "replicas", "min-insync", "cluster-token-file"} {
			if v, ok := set[f]; ok {
				t.Errorf("-%s %s without a cluster", f, v)
			}
		}
	}
	if !w.noNetpol {
		checkNetworkPolicy(t, o, pod.Labels, ports, w.cluster != nil, w.clients)
	}
	portOK := func(p intstr.IntOrString) bool {
		if p.Type == intstr.String {
			_, ok := ports[p.StrVal]
			return ok
		}
		for _, n := range ports {
			if n == p.IntVal {
				return true
			}
		}
		return false
	}

	// Probes: /healthz for liveness, /readyz for readiness, over HTTPS
	// with TLS; with mutual TLS the kubelet cannot pass, so TCP.
	for _, pr := range []struct {
		what  string
		probe *corev1.Probe
		path  string
		port  string // with mutual TLS
	}{{"liveness", c.LivenessProbe, "/healthz", "http"}, {"readiness", c.ReadinessProbe, "/readyz", "tcp"}} {
		if pr.probe == nil {
			t.Errorf("no %s probe", pr.what)
			continue
		}
		if w.mtls {
			if g := pr.probe.TCPSocket; g == nil || g.Port.String() != pr.port {
				t.Errorf("%s probe %+v, want a TCP check of port %s under mutual TLS", pr.what, pr.probe.ProbeHandler, pr.port)
			}
			continue
		}
		g := pr.probe.HTTPGet
		scheme := corev1.URISchemeHTTP
		if w.tls {
			scheme = corev1.URISchemeHTTPS
		}
		if g == nil || g.Path != pr.path || g.Port.String() != "http" || (g.Scheme != scheme && !(g.Scheme == "" && !w.tls)) {
			t.Errorf("%s probe %+v, want GET %s %s on port http", pr.what, pr.probe.ProbeHandler, scheme, pr.path)
		}
	}
	ann := pod.Annotations
	if ann["prometheus.io/scrape"] != "true" || ann["prometheus.io/path"] != "/metrics" || ann["prometheus.io/port"] != "4353" {
		t.Errorf("pod annotations %v: want Prometheus to scrape /metrics on 4353", ann)
	}
	if w.tls != (ann["prometheus.io/scheme"] == "https") {
		t.Errorf("prometheus.io/scheme %q with TLS %v", ann["prometheus.io/scheme"], w.tls)
	}
	if v, ok := set["prometheus"]; ok && v != "true" {
		t.Errorf("-prometheus=%s, but the pods are scraped", v)
	}

	// Services: one headless (the StatefulSet's serviceName), one for
	// clients; both select the pods and reach both ports.
	var headless *corev1.Service
	for _, svc := range o.services {
		if svc.Spec.ClusterIP == corev1.ClusterIPNone {
			headless = svc
		}
		if sel := labels.SelectorFromSet(svc.Spec.Selector); len(svc.Spec.Selector) == 0 || !sel.Matches(podLabels) {
			t.Errorf("Service %s selects %v, not the pods %v", svc.Name, svc.Spec.Selector, pod.Labels)
		}
		seen := map[int32]bool{}
		for _, p := range svc.Spec.Ports {
			if !portOK(p.TargetPort) {
				t.Errorf("Service %s: port %s targets %s, which the container does not have", svc.Name, p.Name, p.TargetPort.String())
			}
			seen[p.Port] = true
		}
		if !seen[4353] || !seen[14353] {
			t.Errorf("Service %s serves ports %v, want 4353 and 14353", svc.Name, seen)
		}
		if svc == headless && w.cluster != nil && !seen[ports["cluster"]] {
			t.Errorf("the headless Service %s serves ports %v, not the cluster port %d", svc.Name, seen, ports["cluster"])
		}
	}
	if headless == nil || sts.Spec.ServiceName != headless.Name {
		t.Errorf("serviceName %q is not the headless Service", sts.Spec.ServiceName)
	} else if !headless.Spec.PublishNotReadyAddresses {
		t.Errorf("the headless Service hides recovering pods")
	}
	pdb := o.pdbs[0]
	if sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector); err != nil || sel.Empty() || !sel.Matches(podLabels) {
		t.Errorf("the PodDisruptionBudget's selector %v does not select the pods", pdb.Spec.Selector)
	}
	if pdb.Spec.MaxUnavailable == nil && pdb.Spec.MinAvailable == nil {
		t.Errorf("the PodDisruptionBudget sets no bound")
	}
	if c := w.cluster; c != nil {
		// A drain must leave every topic -min-insync replicas, or
		// produces with acks=all are refused meanwhile.
		if m := pdb.Spec.MaxUnavailable; m == nil || m.Type != intstr.Int || m.IntValue() < 1 || m.IntValue() > c.replicas-c.minInsync {
			t.Errorf("the PodDisruptionBudget's maxUnavailable %v: want 1 to %d (-replicas %d less -min-insync %d)",
				m, c.replicas-c.minInsync, c.replicas, c.minInsync)
		}
	}

	// Volumes: the two claim templates in order, then an emptyDir last;
	// /tmp writable; secrets mounted where the flags point.
	if len(sts.Spec.VolumeClaimTemplates) != 2 {
		t.Fatalf("%d volumeClaimTemplates, want 2", len(sts.Spec.VolumeClaimTemplates))
	}
	claims := map[string]corev1.PersistentVolumeClaim{}
	for _, vc := range sts.Spec.VolumeClaimTemplates {
		claims[vc.Name] = vc
		if got := vc.Spec.Resources.Requests.Storage().String(); got != w.size {
			t.Errorf("claim %s asks for %s, want %s", vc.Name, got, w.size)
		}
		got := ""
		if vc.Spec.StorageClassName != nil {
			got = *vc.Spec.StorageClassName
		}
		if got != w.storageClass {
			t.Errorf("claim %s: storage class %q, want %q", vc.Name, got, w.storageClass)
		}
	}
	volumes := map[string]corev1.Volume{}
	for _, v := range pod.Spec.Volumes {
		volumes[v.Name] = v
	}
	mounts := map[string]corev1.VolumeMount{} // by mount path
	for _, m := range c.VolumeMounts {
		if _, ok := volumes[m.Name]; !ok {
			if _, ok := claims[m.Name]; !ok {
				t.Errorf("mount %s: no volume or claim %q", m.MountPath, m.Name)
			}
		}
		mounts[m.MountPath] = m
	}
	if len(vols) != 3 {
		t.Fatalf("the server gets volumes %q, want three", vols)
	}
	for i, v := range vols {
		m, ok := mounts[v]
		switch {
		case !ok:
			t.Errorf("volume %s is not mounted", v)
		case i < 2 && m.Name != sts.Spec.VolumeClaimTemplates[i].Name:
			t.Errorf("volume %d (%s) is %q, want the claim %q", i+1, v, m.Name, sts.Spec.VolumeClaimTemplates[i].Name)
		case i == 2 && volumes[m.Name].EmptyDir == nil:
			t.Errorf("the last volume %s is %q, want an emptyDir", v, m.Name)
		case i == 2 && volumes[m.Name].EmptyDir.SizeLimit.String() != w.size:
			t.Errorf("the last volume's limit is %v, want %s", volumes[m.Name].EmptyDir.SizeLimit, w.size)
		}
	}
	if m, ok := mounts["/tmp"]; !ok || volumes[m.Name].EmptyDir == nil {
		t.Errorf("/tmp is not an emptyDir: the root filesystem is read-only and the broker needs a temp dir")
	}
	// secretAt is the Secret and key mounted at path, "" if none.
	secretAt := func(path string) (name, key string) {
		for mp, m := range mounts {
			sv := volumes[m.Name].Secret
			if !strings.HasPrefix(path, mp+"/") || sv == nil {
				continue
			}
			key = strings.TrimPrefix(path, mp+"/")
			if len(sv.Items) == 0 {
				return sv.SecretName, key
			}
			for _, it := range sv.Items {
				if it.Path == key {
					return sv.SecretName, it.Key
				}
			}
		}
		return "", ""
	}
	tlsSecret := w.tlsSecret
	if tlsSecret == "" {
		tlsSecret = "haraqa-tls"
	}
	// Every cluster has its members' shared secret, with or without auth:
	// the cluster port admits no one without it.
	for _, f := range []struct {
		flag, secret, key string // the Secret and the key a cert-manager Secret has
		want              bool
	}{{"tls-cert", tlsSecret, "tls.crt", w.tls}, {"tls-key", tlsSecret, "tls.key", w.tls},
		{"tls-client-ca", tlsSecret, "ca.crt", w.mtls}, {"cluster-ca", tlsSecret, "ca.crt", w.clusterCA},
		{"auth-file", "", "", w.authFile}, {"cluster-token-file", "", "", w.cluster != nil}} {
		v, ok := set[f.flag]
		if ok != f.want {
			t.Errorf("-%s set %v, want %v", f.flag, ok, f.want)
		}
		if !ok {
			continue
		}
		name, key := secretAt(v)
		if name == "" || (f.secret != "" && (name != f.secret || key != f.key)) {
			t.Errorf("-%s %s is key %q of the Secret %q mounted there, want %q of %q", f.flag, v, key, name, f.key, f.secret)
		}
	}

	// Security: non-root with fsGroup (so the volumes are writable),
	// read-only root, no privilege escalation, no capabilities.
	psc, sc := pod.Spec.SecurityContext, c.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser == 0 ||
		psc.FSGroup == nil || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod securityContext %+v: want non-root, a user, an fsGroup and the runtime's seccomp profile", psc)
	}
	if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.Capabilities == nil || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" || len(sc.Capabilities.Add) != 0 {
		t.Errorf("container securityContext %+v: want a read-only root, no escalation, all capabilities dropped", sc)
	}
	if pod.Spec.AutomountServiceAccountToken == nil || *pod.Spec.AutomountServiceAccountToken {
		t.Errorf("the pods get a service account token they never use")
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() {
		t.Errorf("resource requests %v: want cpu and memory", c.Resources.Requests)
	}
	if lim := c.Resources.Limits.Memory(); !lim.IsZero() {
		b, err := parseInt(set["max-buffered-bytes"])
		if err != nil || b <= 0 || b > lim.Value()/2 {
			t.Errorf("-max-buffered-bytes %q with a memory limit of %v: want it set, at most half (the server does not read cgroup limits)",
				set["max-buffered-bytes"], lim)
		}
		// The Go runtime's soft limit: -memory-limit, by default the
		// budget and a quarter plus 128 MiB (server.DefaultMemoryLimit).
		soft := b + b/4 + 128<<20
		if v, ok := set["memory-limit"]; ok {
			soft, _ = parseInt(v)
		}
		if soft <= 0 || soft > lim.Value()*9/10 {
			t.Errorf("the Go runtime's memory limit would be %d bytes, over 90%% of the container's %v", soft, lim)
		}
	}
	return sts
}

// authFile is an auth file, the token it holds with admin on every topic
// and the one it holds with replication on every topic, which a cluster's
// servers present to each other.
type authFile struct{ token, file, clusterToken string }

// testAuth is the auth file and cluster token the tests write where the
// Secret the operator makes would be mounted (deploy/kubernetes).
func testAuth() authFile {
	admin, cluster := sha256.Sum256([]byte("deploy-test-token")), sha256.Sum256([]byte("deploy-cluster-token"))
	return authFile{token: "deploy-test-token", clusterToken: "deploy-cluster-token",
		file: hex.EncodeToString(admin[:]) + " admin *\n" + hex.EncodeToString(cluster[:]) + " replication *\n"}
}

// runContainerArgs runs the server with the StatefulSet's container args
// on loopback, volumes and secret files mapped to temporary ones (the auth
// file given, else testAuth's; a CA, a server certificate for 127.0.0.1
// and a client certificate), and checks the probe and metrics paths answer
// on the HTTP port and the binary port serves.
func runContainerArgs(t *testing.T, s server, sts *appsv1.StatefulSet, given ...authFile) {
	t.Helper()
	c := sts.Spec.Template.Spec.Containers[0]
	set, vols, err := s.parseArgs(c.Args)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	af := testAuth()
	if len(given) > 0 {
		af = given[0]
	}
	token := af.token
	var pki *testPKI
	if _, ok := set["tls-cert"]; ok {
		pki = newTestPKI(t, filepath.Join(dir, "tls"))
	}
	flags := mapFlags(s, c.Args[:len(c.Args)-len(vols)], set, func(name, v string) string {
		switch name {
		case "auth-file":
			return writeFile(t, filepath.Join(dir, "auth"), af.file)
		case "tls-cert", "tls-key", "tls-client-ca":
			return filepath.Join(pki.dir, filepath.Base(v)) // tls.crt, tls.key, ca.crt as in a Secret
		}
		return v
	})
	var local []string
	for i := range vols {
		local = append(local, filepath.Join(dir, "vol", vols[i]))
	}
	r := s.start(t, flags, local)
	_, mtls := set["tls-client-ca"]
	hc, scheme := &http.Client{Timeout: 2 * time.Second}, "http://"
	if pki != nil {
		hc.Transport = &http.Transport{TLSClientConfig: pki.clientConfig(mtls)}
		scheme = "https://"
	}
	url := func(path string) string { return scheme + r.http + path }
	getURL(t, hc, url("/healthz"), "", 200, r.log)
	getURL(t, hc, url("/readyz"), "", 200, r.log)
	metricsToken := ""
	if _, auth := set["auth-file"]; auth && set["auth-metrics"] != "false" {
		getURL(t, hc, url("/metrics"), "", 401, r.log)
		metricsToken = token
	}
	if m := getURL(t, hc, url("/metrics"), metricsToken, 200, r.log); !strings.Contains(m, "haraqa_") {
		t.Errorf("/metrics has no haraqa_ metrics:\n%.500s", m)
	}
	if pki != nil {
		// The binary port answers a ping over TLS (the client's TLS
		// options are not needed for that).
		conn, err := tls.Dial("tcp", r.tcp, pki.clientConfig(mtls))
		if err != nil {
			t.Fatalf("TLS to the binary port: %v\n%s", err, r.log())
		}
		conn.SetDeadline(time.Now().Add(ioTimeout))
		if _, err := conn.Write(protocol.AppendPingRequest(nil, 7)); err != nil {
			t.Fatal(err)
		}
		head := make([]byte, protocol.HeaderSize)
		if _, err := io.ReadFull(conn, head); err != nil {
			t.Fatalf("ping over TLS: %v\n%s", err, r.log())
		}
		if h, _, err := protocol.ParseResponseHeader(head); err != nil || h.Code != protocol.CodeOK || h.CorrID != 7 {
			t.Fatalf("ping over TLS: %+v %v", h, err)
		}
		conn.Close()
		r.stop(t)
		return
	}
	ctx := t.Context()
	var opts []client.Option
	if _, ok := set["auth-file"]; ok {
		opts = append(opts, client.WithToken(token))
	}
	cl, err := client.Dial(ctx, r.tcp, opts...)
	if err != nil {
		t.Fatalf("dial %s: %v\n%s", r.tcp, err, r.log())
	}
	defer cl.Close()
	if _, err := cl.Produce(ctx, "deploy", []byte("hello")); err != nil {
		t.Fatalf("produce: %v\n%s", err, r.log())
	}
	msgs, err := cl.Consume(ctx, "deploy", 0, 1)
	if err != nil || len(msgs) != 1 || string(msgs[0].Value) != "hello" {
		t.Fatalf("consume: %v %v\n%s", msgs, err, r.log())
	}
	r.stop(t)
	for _, v := range local {
		if _, err := os.Stat(filepath.Join(v, "topics", "deploy")); err != nil {
			t.Errorf("volume %s holds no topic: %v", v, err)
		}
	}
}

func parseInt(s string) (int64, error) { return strconv.ParseInt(s, 10, 64) }

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
