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

func TestChartDefaults(t *testing.T) {
	s := haraqa(t)
	o, files, err := render(t, "haraqa", "")
	if err != nil {
		t.Fatal(err)
	}
	sts := checkObjects(t, s, o, want{replicas: 1, size: "10Gi", authFile: true})
	if sts.Name != "haraqa" || sts.Spec.ServiceName != "haraqa-headless" {
		t.Errorf("names %q and %q, want haraqa and haraqa-headless as in kubernetes/", sts.Name, sts.Spec.ServiceName)
	}
	if !strings.Contains(files["haraqa/templates/NOTES.txt"], "get secret haraqa-auth") {
		t.Errorf("NOTES.txt does not say how to read the generated token:\n%s", files["haraqa/templates/NOTES.txt"])
	}
	made := generatedAuth(t, o, "haraqa-auth")

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
	} {
		if !reflect.DeepEqual(f.plain, f.helm) {
			t.Errorf("%s differ between kubernetes/ and the chart's defaults:\n%+v\n%+v", f.what, f.plain, f.helm)
		}
	}
	if t.Failed() {
		return
	}
	runContainerArgs(t, s, sts, made)
}

// generatedAuth checks the Secret the chart makes when no auth Secret is
// named: one admin token on every topic, kept beside its auth file line.
func generatedAuth(t *testing.T, o objects, name string) authFile {
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
	return authFile{token: token, file: file}
}

func TestChartValues(t *testing.T) {
	s := haraqa(t)
	o, _, err := render(t, "q", `
replicas: 3
volumes: {size: 50Gi, storageClass: fast-ssd}
flags: [-fsync, interval, -retention-age, 168h]
maxBufferedBytes: 268435456
auth: {enabled: true, secretName: q-auth, key: rules, metrics: false}
`)
	if err != nil {
		t.Fatal(err)
	}
	sts := checkObjects(t, s, o, want{replicas: 3, size: "50Gi", storageClass: "fast-ssd", authFile: true,
		flags: map[string]string{"fsync": "interval", "retention-age": "168h", "auth-file": "/etc/haraqa/auth/rules",
			"auth-metrics": "false", "max-buffered-bytes": "268435456"}})
	if sts.Name != "q-haraqa" || sts.Spec.ServiceName != "q-haraqa-headless" {
		t.Errorf("names %q and %q, want the release's", sts.Name, sts.Spec.ServiceName)
	}
	for _, v := range sts.Spec.Template.Spec.Volumes {
		if v.Secret != nil && v.Secret.SecretName != "q-auth" {
			t.Errorf("volume %s mounts Secret %q, want q-auth", v.Name, v.Secret.SecretName)
		}
	}
	if t.Failed() {
		return
	}
	runContainerArgs(t, s, sts)
}

func TestChartTLS(t *testing.T) {
	s := haraqa(t)
	for _, mtls := range []bool{false, true} {
		values := "tls: {enabled: true, secretName: haraqa-tls}"
		if mtls {
			values = "tls: {enabled: true, secretName: haraqa-tls, clientCA: true}"
		}
		o, _, err := render(t, "haraqa", values+"\nauth: {enabled: false}")
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
		"tls: {enabled: true}":    "secretName",
		"volume: {size: 100Gi}":   "volume", // a misspelt key: the schema allows no others
		"volumes: {sise: 100Gi}":  "sise",
		"replicas: three":         "replicas",
		"flags: -fsync":           "flags",
		"local: {medium: Memroy}": "medium",
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
