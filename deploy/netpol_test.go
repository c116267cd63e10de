package deploy

import (
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// peer is where a connection to the pods comes from: a pod (labels set)
// in a namespace, or an address outside the cluster (labels nil).
type peer struct {
	what      string
	labels    map[string]string
	namespace string
	nsLabels  map[string]string
	ip        string
}

// otherNamespace is a namespace of the cluster other than the pods'.
const otherNamespace = "apps"

// peersOf are the peers the NetworkPolicy checks try: one of the pods
// themselves, another pod of their namespace, a pod of another namespace
// that carries the pods' own labels, and an address outside the cluster.
func peersOf(podLabels map[string]string) (self, neighbour, lookalike, outside peer) {
	nsLabels := func(ns string) map[string]string { return map[string]string{"kubernetes.io/metadata.name": ns} }
	return peer{"one of the pods", podLabels, testNamespace, nsLabels(testNamespace), "10.1.0.5"},
		peer{"another pod of the namespace", map[string]string{"app": "web"}, testNamespace, nsLabels(testNamespace), "10.1.0.6"},
		peer{"a pod of another namespace with the pods' labels", podLabels, otherNamespace, nsLabels(otherNamespace), "10.1.0.7"},
		peer{"an address outside the cluster", nil, "", nil, "203.0.113.9"}
}

// admits says whether the NetworkPolicies nps, all in testNamespace, let
// from connect to port (TCP) of a pod labelled podLabels whose container
// names its ports as ports do. This is the API's rule: a pod no policy of
// type Ingress selects admits everything; a selected pod admits what one
// rule of one selecting policy admits. A rule admits a port it lists (by
// number or by the container's name for it; none listed: every port) from
// a peer it lists (none listed: from anywhere): a podSelector alone picks
// pods of the policy's namespace, a namespaceSelector pods of the
// namespaces it picks, both the pods of the one in those namespaces; an
// ipBlock an address in its CIDR outside its exceptions.
func admits(t *testing.T, nps []*networkingv1.NetworkPolicy, podLabels map[string]string, ports map[string]int32, from peer, port int32) bool {
	t.Helper()
	selected := false
	for _, np := range nps {
		if !matches(t, &np.Spec.PodSelector, podLabels) || !hasIngress(np) {
			continue
		}
		selected = true
		for _, r := range np.Spec.Ingress {
			if portListed(t, r.Ports, ports, port) && peerListed(t, r.From, from) {
				return true
			}
		}
	}
	return !selected
}

func hasIngress(np *networkingv1.NetworkPolicy) bool {
	if len(np.Spec.PolicyTypes) == 0 {
		return true // the API's default: Ingress, and Egress if it has egress rules
	}
	for _, pt := range np.Spec.PolicyTypes {
		if pt == networkingv1.PolicyTypeIngress {
			return true
		}
	}
	return false
}

func portListed(t *testing.T, list []networkingv1.NetworkPolicyPort, ports map[string]int32, port int32) bool {
	t.Helper()
	if len(list) == 0 {
		return true
	}
	for _, p := range list {
		if p.Protocol != nil && *p.Protocol != corev1.ProtocolTCP {
			continue
		}
		if p.Port == nil {
			return true
		}
		n := p.Port.IntVal
		if p.Port.StrVal != "" {
			var ok bool
			if n, ok = ports[p.Port.StrVal]; !ok {
				t.Errorf("a NetworkPolicy names port %q, which the container does not", p.Port.StrVal)
				continue
			}
		}
		end := n
		if p.EndPort != nil {
			end = *p.EndPort
		}
		if n <= port && port <= end {
			return true
		}
	}
	return false
}

func peerListed(t *testing.T, list []networkingv1.NetworkPolicyPeer, from peer) bool {
	t.Helper()
	if len(list) == 0 {
		return true
	}
	for _, p := range list {
		switch {
		case p.IPBlock != nil:
			if inBlock(t, p.IPBlock, from.ip) {
				return true
			}
		case from.labels == nil:
			// Pod and namespace selectors pick pods only.
		case p.NamespaceSelector == nil:
			if from.namespace == testNamespace && matches(t, p.PodSelector, from.labels) {
				return true
			}
		default:
			if matches(t, p.NamespaceSelector, from.nsLabels) && (p.PodSelector == nil || matches(t, p.PodSelector, from.labels)) {
				return true
			}
		}
	}
	return false
}

func inBlock(t *testing.T, b *networkingv1.IPBlock, ip string) bool {
	t.Helper()
	addr := netip.MustParseAddr(ip)
	in := func(cidr string) bool {
		p, err := netip.ParsePrefix(cidr)
		if err != nil {
			t.Errorf("ipBlock %q: %v", cidr, err)
			return false
		}
		return p.Contains(addr)
	}
	if !in(b.CIDR) {
		return false
	}
	for _, e := range b.Except {
		if in(e) {
			return false
		}
	}
	return true
}

func matches(t *testing.T, s *metav1.LabelSelector, set map[string]string) bool {
	t.Helper()
	sel, err := metav1.LabelSelectorAsSelector(s)
	if err != nil {
		t.Errorf("selector %v: %v", s, err)
		return false
	}
	return sel.Matches(labels.Set(set))
}

// clientPeers are who may reach the client ports beyond the pods
// themselves: nil for anyone, else the peers that must be admitted (those
// of peersOf not listed must be refused).
type clientPeers []peer

// checkNetworkPolicy checks a deployment's NetworkPolicy: the cluster
// port, with a cluster, admits the pods and nothing else, not a pod of
// another namespace that carries their labels; the client ports admit the
// pods and clients (anyone when nil); any other port admits no one.
func checkNetworkPolicy(t *testing.T, o objects, podLabels map[string]string, ports map[string]int32, cluster bool, clients clientPeers) {
	t.Helper()
	if len(o.netpols) != 1 {
		t.Errorf("%d NetworkPolicies, want 1", len(o.netpols))
		return
	}
	if !matches(t, &o.netpols[0].Spec.PodSelector, podLabels) || !hasIngress(o.netpols[0]) {
		t.Errorf("the NetworkPolicy does not restrict ingress to the pods %v: %+v", podLabels, o.netpols[0].Spec)
	}
	self, neighbour, lookalike, outside := peersOf(podLabels)
	check := func(port int32, from peer, want bool) {
		t.Helper()
		if got := admits(t, o.netpols, podLabels, ports, from, port); got != want {
			t.Errorf("port %d from %s: admitted %v, want %v", port, from.what, got, want)
		}
	}
	if cluster {
		check(ports["cluster"], self, true)
		for _, p := range []peer{neighbour, lookalike, outside} {
			check(ports["cluster"], p, false)
		}
	}
	for _, port := range []int32{ports["tcp"], ports["http"]} {
		check(port, self, true)
		for _, p := range []peer{neighbour, lookalike, outside} {
			want := clients == nil
			for _, c := range clients {
				want = want || c.what == p.what
			}
			check(port, p, want)
		}
	}
	for _, p := range []peer{self, neighbour, lookalike, outside} {
		check(6060, p, false)
	}
}

// TestAdmits checks the rule admits follows on policies written for it.
func TestAdmits(t *testing.T) {
	podLabels := map[string]string{"app.kubernetes.io/name": "haraqa"}
	self, neighbour, lookalike, outside := peersOf(podLabels)
	ports := map[string]int32{"tcp": 14353}
	sel := metav1.LabelSelector{MatchLabels: podLabels}
	ingress := []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}
	policy := func(rules ...networkingv1.NetworkPolicyIngressRule) []*networkingv1.NetworkPolicy {
		return []*networkingv1.NetworkPolicy{{Spec: networkingv1.NetworkPolicySpec{PodSelector: sel, PolicyTypes: ingress, Ingress: rules}}}
	}
	otherNS := &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": otherNamespace}}
	for _, tc := range []struct {
		what  string
		nps   []*networkingv1.NetworkPolicy
		admit map[string]bool // by peer
	}{
		{"no policy", nil, map[string]bool{self.what: true, neighbour.what: true, lookalike.what: true, outside.what: true}},
		{"deny all", policy(), map[string]bool{}},
		{"allow all", policy(networkingv1.NetworkPolicyIngressRule{}), map[string]bool{self.what: true, neighbour.what: true, lookalike.what: true, outside.what: true}},
		{"pods of the namespace", policy(networkingv1.NetworkPolicyIngressRule{From: []networkingv1.NetworkPolicyPeer{{PodSelector: &sel}}}),
			map[string]bool{self.what: true}},
		{"another namespace", policy(networkingv1.NetworkPolicyIngressRule{From: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: otherNS}}}),
			map[string]bool{lookalike.what: true}},
		{"an address block", policy(networkingv1.NetworkPolicyIngressRule{From: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "0.0.0.0/0", Except: []string{"10.0.0.0/8"}}}}}),
			map[string]bool{outside.what: true}},
	} {
		for _, p := range []peer{self, neighbour, lookalike, outside} {
			if got := admits(t, tc.nps, podLabels, ports, p, 14353); got != tc.admit[p.what] {
				t.Errorf("%s: %s admitted %v", tc.what, p.what, got)
			}
		}
	}
	// Ports by name and number.
	named := policy(networkingv1.NetworkPolicyIngressRule{Ports: []networkingv1.NetworkPolicyPort{{Port: ptrIntOrString("tcp")}}})
	if !admits(t, named, podLabels, ports, outside, 14353) || admits(t, named, podLabels, ports, outside, 4353) {
		t.Error("a port named tcp: wrong ports admitted")
	}
}

func ptrIntOrString(name string) *intstr.IntOrString {
	v := intstr.FromString(name)
	return &v
}
