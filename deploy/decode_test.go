package deploy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// objects are the Kubernetes objects of one deployment, by kind.
type objects struct {
	statefulSets []*appsv1.StatefulSet
	services     []*corev1.Service
	pdbs         []*policyv1.PodDisruptionBudget
	secrets      []*corev1.Secret
	netpols      []*networkingv1.NetworkPolicy
	certificates []*certificate
	issuers      []*issuer
}

// certificate is the part of cert-manager's Certificate (cert-manager.io/v1)
// the deployment writes: decoded strictly, a field it does not list here
// is an error, as for the k8s.io/api types.
type certificate struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		IsCA        bool     `json:"isCA,omitempty"`
		CommonName  string   `json:"commonName,omitempty"`
		SecretName  string   `json:"secretName"`
		Duration    string   `json:"duration,omitempty"`
		RenewBefore string   `json:"renewBefore,omitempty"`
		DNSNames    []string `json:"dnsNames,omitempty"`
		Usages      []string `json:"usages,omitempty"`
		PrivateKey  *struct {
			Algorithm      string `json:"algorithm"`
			Size           int    `json:"size"`
			RotationPolicy string `json:"rotationPolicy,omitempty"`
		} `json:"privateKey,omitempty"`
		IssuerRef struct {
			Name  string `json:"name"`
			Kind  string `json:"kind"`
			Group string `json:"group"`
		} `json:"issuerRef"`
	} `json:"spec"`
}

// issuer is the part of cert-manager's Issuer the deployment writes: a
// self-signed one, or a CA's from a Secret.
type issuer struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		SelfSigned *struct{} `json:"selfSigned,omitempty"`
		CA         *struct {
			SecretName string `json:"secretName"`
		} `json:"ca,omitempty"`
	} `json:"spec"`
}

// decode splits YAML documents and decodes each strictly into its
// k8s.io/api type: an unknown or duplicated field, a value of the wrong
// type or a kind this deployment does not use is an error. name says
// where the documents came from.
func decode(name string, data []byte, into *objects) error {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for n := 1; ; n++ {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: document %d: %w", name, n, err)
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &tm); err != nil {
			return fmt.Errorf("%s: document %d: %w", name, n, err)
		}
		if tm == (metav1.TypeMeta{}) && len(bytes.TrimSpace(stripComments(doc))) == 0 {
			continue // comments only, or empty
		}
		var obj any
		switch tm.APIVersion + " " + tm.Kind {
		case "apps/v1 StatefulSet":
			o := &appsv1.StatefulSet{}
			into.statefulSets, obj = append(into.statefulSets, o), o
		case "v1 Service":
			o := &corev1.Service{}
			into.services, obj = append(into.services, o), o
		case "v1 Secret":
			o := &corev1.Secret{}
			into.secrets, obj = append(into.secrets, o), o
		case "networking.k8s.io/v1 NetworkPolicy":
			o := &networkingv1.NetworkPolicy{}
			into.netpols, obj = append(into.netpols, o), o
		case "cert-manager.io/v1 Certificate":
			o := &certificate{}
			into.certificates, obj = append(into.certificates, o), o
		case "cert-manager.io/v1 Issuer":
			o := &issuer{}
			into.issuers, obj = append(into.issuers, o), o
		case "policy/v1 PodDisruptionBudget":
			o := &policyv1.PodDisruptionBudget{}
			into.pdbs, obj = append(into.pdbs, o), o
		default:
			return fmt.Errorf("%s: document %d: unexpected %q %q", name, n, tm.APIVersion, tm.Kind)
		}
		if err := yaml.UnmarshalStrict(doc, obj); err != nil {
			return fmt.Errorf("%s: document %d (%s): %w", name, n, tm.Kind, err)
		}
	}
}

func stripComments(doc []byte) []byte {
	var out []byte
	for _, line := range strings.Split(string(doc), "\n") {
		if t := strings.TrimSpace(line); t != "" && !strings.HasPrefix(t, "#") {
			out = append(out, line...)
			out = append(out, '\n')
		}
	}
	return out
}

// TestDecodeIsStrict makes sure the decoding above would catch a typo.
func TestDecodeIsStrict(t *testing.T) {
	good := "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata:\n  name: x\nspec:\n  maxUnavailable: 1\n"
	var o objects
	if err := decode("good", []byte("# a comment\n---\n"+good), &o); err != nil || len(o.pdbs) != 1 {
		t.Fatalf("good document: %v, %d objects", err, len(o.pdbs))
	}
	for name, doc := range map[string]string{
		"unknown field":    strings.Replace(good, "maxUnavailable", "maxUnavialable", 1),
		"duplicated field": good + "  maxUnavailable: 2\n",
		"wrong type":       strings.Replace(good, "name: x", "name: [x]", 1),
		"unknown kind":     strings.Replace(good, "PodDisruptionBudget", "Deployment", 1),
	} {
		if err := decode(name, []byte(doc), &objects{}); err == nil {
			t.Errorf("%s: decoded", name)
		}
	}
}
