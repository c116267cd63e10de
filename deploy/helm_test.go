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
// manifests, with a Secret the chart makes, run on loopback.
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
	made := generatedAuth(t, o, "haraqa-auth", "cluster-token")

	// The chart's defaults and the plain manifests describe the same pods.
	plain := loadManifests(t).statefulSets[0]
	pc, cc := plain.Spec.Template.Spec, sts.Spec.Template.Spec
	for _, f := range []struct {
		what        string
		plain, helm any
	}{
		{"container", pc.Containers, cc.Containers},
		{"pod security context", pc.SecurityContext, cc.SecurityContext},
		{"volumes", pc.Volumes, cc.Volumes},
		{"annotations", plain.Spec.Template.Annotations, sts.Spec.Template.Annotations},
		{"claims", claimSpecs(plain.Spec.VolumeClaimTemplates), claimSpecs(sts.Spec.VolumeClaimTemplates)},
		{"grace period", pc.TerminationGracePeriodSeconds, cc.TerminationGracePeriodSeconds},
		{"update strategy", plain.Spec.UpdateStrategy, sts.Spec.UpdateStrategy},
		{"pod management", plain.Spec.PodManagementPolicy, sts.Spec.PodManagementPolicy},
		{"replicas", plain.Spec.Replicas, sts.Spec.Replicas},
		{"budget", loadManifests(t).pdbs[0].Spec.MaxUnavailable, o.pdbs[0].Spec.MaxUnavailable},
	} {
		if !reflect.DeepEqual(f.plain, f.helm) {
			t.Errorf("%s differ between kubernetes/ and the chart's defaults:\n%+v\n%+v", f.what, f.plain, f.helm)
		}
	}
	if t.Failed() {
		return
	}
	ps := startPods(t, s, sts, made)
	ps.exercise(t, 3)
	ps.stop(t)
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
		if !t.Failed() {
			runContainerArgs(t, s, sts)
		}
	}
}

func TestChartRefusesIncompleteValues(t *testing.T) {
	for values, want := range map[string]string{
		"tls: {enabled: true}":                         "secretName",
		"volume: {size: 100Gi}":                        "volume", // a misspelt key: the schema allows no others
		"volumes: {sise: 100Gi}":                       "sise",
		"replicas: three":                              "replicas",
		"flags: -fsync":                                "flags",
		"local: {medium: Memroy}":                      "medium",
		"cluster: {replicas: 3}":                       "replicas", // the pods' count is replicas, the topics' replicationFactor
		"tls: {enabled: true, secretName: haraqa-tls}": "does not work with the cluster",
		"cluster: {replicationFactor: 4}":              "replicationFactor 4 is more than the 3 replicas",
		"cluster: {minInsync: 4}":                      "minInsync 4 is more than cluster.replicationFactor 3",
		"cluster: {minInsync: 0}":                      "minInsync",
		"cluster: {tokenKey: auth}":                    "another key",
		"cluster: {tokenKey: token}":                   "another key",
		"clusterDomain: Cluster_Local":                 "clusterDomain",
		"replicas: 2\ncluster: {replicationFactor: 3}": "replicationFactor 3 is more than the 2 replicas",
		"replicas: 3\ntls: {enabled: true, secretName: x}\nauth: {enabled: false}": "does not work with the cluster",
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
