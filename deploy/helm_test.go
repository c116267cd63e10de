package deploy

import (
	"crypto/sha256"
	"encoding/hex"
	"reflect"
	"sort"
	"strings"
	"testing"

	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/common/util"
	"helm.sh/helm/v4/pkg/chart/v2/lint"
	"helm.sh/helm/v4/pkg/chart/v2/lint/support"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/engine"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

const chartDir = "helm/haraqa"

// render renders the chart as `helm template RELEASE --namespace queues
// -f values` would, and decodes every object strictly.
func render(t *testing.T, release, values string) (objects, map[string]string, error) {
	t.Helper()
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatalf("load %s: %v", chartDir, err)
	}
	vals := map[string]any{}
	if err := yaml.Unmarshal([]byte(values), &vals); err != nil {
		t.Fatalf("values %q: %v", values, err)
	}
	opts := common.ReleaseOptions{Name: release, Namespace: "queues", Revision: 1, IsInstall: true}
	top, err := util.ToRenderValues(ch, vals, opts, common.DefaultCapabilities)
	if err != nil {
		return objects{}, nil, err
	}
	files, err := engine.Render(ch, top)
	if err != nil {
		return objects{}, nil, err
	}
	var names []string
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	var o objects
	for _, name := range names {
		if !strings.HasSuffix(name, ".yaml") {
			continue // NOTES.txt
		}
		if err := decode(name, []byte(files[name]), &o); err != nil {
			t.Fatal(err)
		}
	}
	return o, files, nil
}

func TestChartLint(t *testing.T) {
	l := lint.RunAll(chartDir, map[string]any{}, "queues")
	for _, m := range l.Messages {
		if m.Severity >= support.WarningSev {
			t.Errorf("helm lint: %v", m)
		}
	}
}

// TestChartDefaults checks the chart's defaults: the cluster of the plain
// manifests without TLS, with a Secret the chart makes, run on loopback;
// and with a TLS Secret named haraqa-tls, the plain manifests themselves.
func TestChartDefaults(t *testing.T) {
	s := haraqa(t)
	o, files, err := render(t, "haraqa", "")
	if err != nil {
		t.Fatal(err)
	}
	sts := checkObjects(t, s, o, want{replicas: 3, size: "10Gi", authFile: true, cluster: &manifestsCluster})
	if sts.Name != "haraqa" || sts.Spec.ServiceName != "haraqa-headless" {
		t.Errorf("names %q and %q, want haraqa and haraqa-headless as in kubernetes/", sts.Name, sts.Spec.ServiceName)
	}
	if !strings.Contains(files["haraqa/templates/NOTES.txt"], "get secret haraqa-auth") {
		t.Errorf("NOTES.txt does not say how to read the generated token:\n%s", files["haraqa/templates/NOTES.txt"])
	}
	if notes := files["haraqa/templates/NOTES.txt"]; !strings.Contains(notes, "HARAQA_ADDR="+podHost(sts, 0, "cluster.local")+":14353,") {
		t.Errorf("NOTES.txt does not give clients the pods' names:\n%s", notes)
	}
	if notes := files["haraqa/templates/NOTES.txt"]; !strings.Contains(notes, "No TLS") {
		t.Errorf("NOTES.txt does not say replication is in clear without TLS:\n%s", notes)
	}
	made := generatedAuth(t, o, "haraqa-auth", "cluster-token")

	// The chart with TLS and the plain manifests describe the same pods.
	ot, _, err := render(t, "haraqa", "tls: {enabled: true, secretName: haraqa-tls}")
	if err != nil {
		t.Fatal(err)
	}
	tsts := checkObjects(t, s, ot, want{replicas: 3, size: "10Gi", tls: true, clusterCA: true, authFile: true, cluster: &manifestsCluster})
	plain := loadManifests(t).statefulSets[0]
	pc, cc := plain.Spec.Template.Spec, tsts.Spec.Template.Spec
	for _, f := range []struct {
		what        string
		plain, helm any
	}{
		{"container", pc.Containers, cc.Containers},
		{"pod security context", pc.SecurityContext, cc.SecurityContext},
		{"volumes", pc.Volumes, cc.Volumes},
		{"annotations", plain.Spec.Template.Annotations, tsts.Spec.Template.Annotations},
		{"claims", claimSpecs(plain.Spec.VolumeClaimTemplates), claimSpecs(tsts.Spec.VolumeClaimTemplates)},
		{"grace period", pc.TerminationGracePeriodSeconds, cc.TerminationGracePeriodSeconds},
		{"update strategy", plain.Spec.UpdateStrategy, tsts.Spec.UpdateStrategy},
		{"pod management", plain.Spec.PodManagementPolicy, tsts.Spec.PodManagementPolicy},
		{"replicas", plain.Spec.Replicas, tsts.Spec.Replicas},
		{"budget", loadManifests(t).pdbs[0].Spec.MaxUnavailable, ot.pdbs[0].Spec.MaxUnavailable},
		{"network policy's ports", policyPorts(loadManifests(t)), policyPorts(ot)},
	} {
		if !reflect.DeepEqual(f.plain, f.helm) {
			t.Errorf("%s differ between kubernetes/ and the chart with TLS:\n%+v\n%+v", f.what, f.plain, f.helm)
		}
	}
	if t.Failed() {
		return
	}
	ps := startPods(t, s, sts, made)
	ps.exercise(t, 3)
	ps.stop(t)
}

// policyPorts are the ports of each rule of the NetworkPolicies of o.
func policyPorts(o objects) [][]string {
	var out [][]string
	for _, np := range o.netpols {
		for _, r := range np.Spec.Ingress {
			var ports []string
			for _, p := range r.Ports {
				ports = append(ports, p.Port.String())
			}
			out = append(out, ports)
		}
	}
	return out
}

// generatedAuth checks the Secret the chart makes when no auth Secret is
// named: one admin token on every topic, kept beside its auth file line,
// and, under clusterKey unless it is "", the cluster's token with the
// replication right on every topic.
func generatedAuth(t *testing.T, o objects, name, clusterKey string) authFile {
	t.Helper()
	if len(o.secrets) != 1 || o.secrets[0].Name != name {
		t.Fatalf("%d Secrets (%v), want the generated %s", len(o.secrets), o.secrets, name)
	}
	data := o.secrets[0].Data
	token, file := string(data["token"]), string(data["auth"])
	sum := sha256.Sum256([]byte(token))
	if len(token) < 43 || !strings.Contains(file, hex.EncodeToString(sum[:])+"  admin  *\n") {
		t.Fatalf("the generated Secret's token (%d bytes) and auth file do not match:\n%s", len(token), file)
	}
	af := authFile{token: token, file: file}
	if want := 2 + btoi(clusterKey != ""); len(data) != want {
		t.Errorf("the generated Secret holds %d keys, want %d", len(data), want)
	}
	if clusterKey != "" {
		af.clusterToken = string(data[clusterKey])
		sum := sha256.Sum256([]byte(af.clusterToken))
		if len(af.clusterToken) < 43 || af.clusterToken == token || !strings.Contains(file, hex.EncodeToString(sum[:])+"  replication  *\n") {
			t.Fatalf("the generated Secret's cluster token (%d bytes) and auth file do not match:\n%s", len(af.clusterToken), file)
		}
	}
	return af
}

// TestChartValues renders a cluster of four pods, topics on three, with a
// Secret of the operator's, another cluster domain and more flags, and
// runs it.
func TestChartValues(t *testing.T) {
	s := haraqa(t)
	o, _, err := render(t, "q", `
replicas: 4
cluster: {replicationFactor: 3, minInsync: 2, tokenKey: peer-token}
clusterDomain: example.internal
updatePartition: 2
volumes: {size: 50Gi, storageClass: fast-ssd}
flags: [-fsync, interval, -retention-age, 168h]
maxBufferedBytes: 268435456
auth: {enabled: true, secretName: q-auth, key: rules, metrics: false}
`)
	if err != nil {
		t.Fatal(err)
	}
	sts := checkObjects(t, s, o, want{replicas: 4, size: "50Gi", storageClass: "fast-ssd", authFile: true,
		flags: map[string]string{"fsync": "interval", "retention-age": "168h", "auth-file": "/etc/haraqa/auth/rules",
			"auth-metrics": "false", "max-buffered-bytes": "268435456", "cluster-token-file": "/etc/haraqa/auth/peer-token"},
		cluster: &clusterWant{replicas: 3, minInsync: 2, domain: "example.internal", tokenKey: "peer-token"}})
	if sts.Name != "q-haraqa" || sts.Spec.ServiceName != "q-haraqa-headless" {
		t.Errorf("names %q and %q, want the release's", sts.Name, sts.Spec.ServiceName)
	}
	if len(o.secrets) != 0 {
		t.Errorf("the chart made %d Secrets, with the operator's named", len(o.secrets))
	}
	if ru := sts.Spec.UpdateStrategy.RollingUpdate; ru == nil || ru.Partition == nil || *ru.Partition != 2 {
		t.Errorf("rollingUpdate %+v, want partition 2", ru)
	}
	for _, v := range sts.Spec.Template.Spec.Volumes {
		if v.Secret == nil {
			continue
		}
		var keys []string
		for _, it := range v.Secret.Items {
			keys = append(keys, it.Key)
		}
		if v.Secret.SecretName != "q-auth" || strings.Join(keys, " ") != "rules peer-token" {
			t.Errorf("volume %s mounts keys %v of Secret %q, want rules and peer-token of q-auth", v.Name, keys, v.Secret.SecretName)
		}
	}
	if t.Failed() {
		return
	}
	ps := startPods(t, s, sts, testAuth())
	ps.exercise(t, 3)
	ps.stop(t)
}

// TestChartWithoutCluster renders what turns the cluster off: one pod, a
// single server as before the cluster existed; or several with
// cluster.enabled false, independent servers. Neither has a cluster flag,
// port or token, and the server runs with the args as they are.
func TestChartWithoutCluster(t *testing.T) {
	s := haraqa(t)
	for _, tc := range []struct {
		values string
		pods   int32
	}{{"replicas: 1", 1}, {"replicas: 2\ncluster: {enabled: false}", 2}} {
		o, files, err := render(t, "haraqa", tc.values)
		if err != nil {
			t.Fatal(err)
		}
		sts := checkObjects(t, s, o, want{replicas: tc.pods, size: "10Gi", authFile: true})
		generatedAuth(t, o, "haraqa-auth", "")
		if len(sts.Spec.Template.Spec.Containers[0].Env) != 0 {
			t.Errorf("%s: env %v without a cluster", tc.values, sts.Spec.Template.Spec.Containers[0].Env)
		}
		if strings.Contains(files["haraqa/templates/NOTES.txt"], "One cluster") {
			t.Errorf("%s: NOTES.txt speaks of a cluster", tc.values)
		}
		if !t.Failed() {
			runContainerArgs(t, s, sts)
		}
	}
}

func TestChartTLS(t *testing.T) {
	s := haraqa(t)
	for _, mtls := range []bool{false, true} {
		values := "tls: {enabled: true, secretName: haraqa-tls}"
		if mtls {
			values = "tls: {enabled: true, secretName: haraqa-tls, clientCA: true}"
		}
		o, _, err := render(t, "haraqa", values+"\nauth: {enabled: false}\nreplicas: 1")
		if err != nil {
			t.Fatal(err)
		}
		flags := map[string]string{"tls-cert": "/etc/haraqa/tls/tls.crt", "tls-key": "/etc/haraqa/tls/tls.key"}
		if mtls {
			flags["tls-client-ca"] = "/etc/haraqa/tls/ca.crt"
		}
		sts := checkObjects(t, s, o, want{replicas: 1, size: "10Gi", tls: true, mtls: mtls, flags: flags})
		if len(o.secrets) != 0 || len(o.certificates) != 0 {
			t.Errorf("%d Secrets and %d Certificates without auth or a cluster, with the TLS Secret named", len(o.secrets), len(o.certificates))
		}
		if !t.Failed() {
			runContainerArgs(t, s, sts)
		}
	}
}

// TestChartClusterTLS renders a cluster with TLS between its servers: a
// cert-manager Certificate the chart makes into the Secret the pods mount,
// for every pod's name, and -cluster-ca the Secret's ca.crt; auth off, so
// the Secret the chart makes holds the members' shared secret alone. Its
// three pods run on loopback with the Certificate's names (and 127.0.0.1)
// in a certificate of the test's CA, and form one cluster over TLS. Then
// the same with mutual TLS and tls.clusterCA false: -tls-client-ca's CA
// verifies the members.
func TestChartClusterTLS(t *testing.T) {
	s := haraqa(t)
	for _, tc := range []struct {
		values    string
		mtls, ca  bool
		secret    string
		certNames bool
	}{
		{"tls: {enabled: true, certManager: {issuer: haraqa-ca}}", false, true, "q-haraqa-tls", true},
		{"tls: {enabled: true, secretName: own-tls, clientCA: true, clusterCA: false}", true, false, "own-tls", false},
	} {
		o, files, err := render(t, "q", tc.values+"\nauth: {enabled: false}\nclusterDomain: example.internal")
		if err != nil {
			t.Fatal(err)
		}
		cw := clusterWant{replicas: 3, minInsync: 2, domain: "example.internal", tokenKey: "cluster-token"}
		flags := map[string]string{"tls-cert": "/etc/haraqa/tls/tls.crt", "tls-key": "/etc/haraqa/tls/tls.key",
			"cluster-token-file": "/etc/haraqa/auth/cluster-token"}
		if tc.ca {
			flags["cluster-ca"] = "/etc/haraqa/tls/ca.crt"
		}
		sts := checkObjects(t, s, o, want{replicas: 3, size: "10Gi", tls: true, mtls: tc.mtls, tlsSecret: tc.secret,
			clusterCA: tc.ca, flags: flags, cluster: &cw})
		af := generatedClusterSecret(t, o, "q-haraqa-auth", "cluster-token")
		if notes := files["haraqa/templates/NOTES.txt"]; !strings.Contains(notes, "No auth file") ||
			!strings.Contains(notes, "TLS on every port and between the servers") || !strings.Contains(notes, "get secret "+tc.secret) {
			t.Errorf("NOTES.txt does not say auth is off, or where the TLS Secret's CA is:\n%s", notes)
		}
		var names []string
		if tc.certNames {
			if len(o.certificates) != 1 {
				t.Fatalf("%d Certificates, want the one for the pods", len(o.certificates))
			}
			c := o.certificates[0]
			if c.Spec.IssuerRef.Name != "haraqa-ca" || c.Spec.IssuerRef.Kind != "Issuer" || c.Spec.IssuerRef.Group != "cert-manager.io" {
				t.Errorf("issuerRef %+v, want the Issuer haraqa-ca", c.Spec.IssuerRef)
			}
			names = checkCertificate(t, c, sts, testNamespace, cw.domain)
		} else if len(o.certificates) != 0 {
			t.Errorf("a Certificate with the operator's Secret")
		}
		if t.Failed() {
			return
		}
		ps := startPods(t, s, sts, af, names...)
		if tc.certNames {
			checkServerCert(t, ps, sts, cw.domain)
		}
		ps.exercise(t, 3)
		ps.stop(t)
	}
}

// generatedClusterSecret checks the Secret the chart makes for a cluster
// without auth: the members' shared secret under key, alone.
func generatedClusterSecret(t *testing.T, o objects, name, key string) authFile {
	t.Helper()
	if len(o.secrets) != 1 || o.secrets[0].Name != name {
		t.Fatalf("%d Secrets (%v), want the generated %s", len(o.secrets), o.secrets, name)
	}
	data := o.secrets[0].Data
	if len(data) != 1 || len(data[key]) < 43 {
		t.Fatalf("the generated Secret holds %d keys, want %s alone, of 43 characters or more", len(data), key)
	}
	return authFile{clusterToken: string(data[key])}
}

// TestChartNetworkPolicy renders the NetworkPolicy with the client ports
// narrowed to another namespace, and without it.
func TestChartNetworkPolicy(t *testing.T) {
	s := haraqa(t)
	o, _, err := render(t, "haraqa", "networkPolicy: {clientFrom: [{namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: apps}}}]}")
	if err != nil {
		t.Fatal(err)
	}
	_, _, lookalike, _ := peersOf(nil)
	checkObjects(t, s, o, want{replicas: 3, size: "10Gi", authFile: true, cluster: &manifestsCluster, clients: clientPeers{lookalike}})
	o, _, err = render(t, "haraqa", "networkPolicy: {enabled: false}")
	if err != nil {
		t.Fatal(err)
	}
	checkObjects(t, s, o, want{replicas: 3, size: "10Gi", authFile: true, cluster: &manifestsCluster, noNetpol: true})
}

func TestChartRefusesIncompleteValues(t *testing.T) {
	for values, want := range map[string]string{
		"tls: {enabled: true}":                         "secretName",
		"tls: {certManager: {kind: Issuers}}":          "kind",
		"tls: {clusterCa: true}":                       "clusterCa",
		"networkPolicy: {clientFrom: apps}":            "clientFrom",
		"networkPolicy: {enable: false}":               "enable",
		"volume: {size: 100Gi}":                        "volume", // a misspelt key: the schema allows no others
		"volumes: {sise: 100Gi}":                       "sise",
		"replicas: three":                              "replicas",
		"flags: -fsync":                                "flags",
		"local: {medium: Memroy}":                      "medium",
		"cluster: {replicas: 3}":                       "replicas", // the pods' count is replicas, the topics' replicationFactor
		"cluster: {replicationFactor: 4}":              "replicationFactor 4 is more than the 3 replicas",
		"cluster: {minInsync: 4}":                      "minInsync 4 is more than cluster.replicationFactor 3",
		"cluster: {minInsync: 0}":                      "minInsync",
		"cluster: {tokenKey: auth}":                    "another key",
		"cluster: {tokenKey: token}":                   "another key",
		"clusterDomain: Cluster_Local":                 "clusterDomain",
		"replicas: 2\ncluster: {replicationFactor: 3}": "replicationFactor 3 is more than the 2 replicas",
	} {
		if _, _, err := render(t, "haraqa", values); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("values %q: %v, want an error naming %s", values, err, want)
		}
	}
}

func claimSpecs(claims []corev1.PersistentVolumeClaim) []corev1.PersistentVolumeClaimSpec {
	var out []corev1.PersistentVolumeClaimSpec
	for _, c := range claims {
		out = append(out, c.Spec)
	}
	return out
}
