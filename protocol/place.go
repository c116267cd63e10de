package protocol

import (
	"cmp"
	"slices"
	"strings"
)

// This file: where a topic is placed among servers, which clients and the
// servers of a cluster compute alike from the same names (docs/scaling.md).

// Place returns the index in addrs of the server a new topic goes to:
// rendezvous (highest random weight) hashing, the server whose hash of
// (address, topic) is highest. Adding a server moves a topic's place only
// to the new server, and only for about 1/n of the names; removing one
// moves only the topics placed on it. Every caller given the same
// addresses, in any order, places a topic alike. It returns -1 for no
// addresses.
func Place(topic string, addrs []string) int {
	best, bestW := -1, uint64(0)
	for i, a := range addrs {
		if w := placeWeight(a, topic); best < 0 || w > bestW || (w == bestW && a < addrs[best]) {
			best, bestW = i, w
		}
	}
	return best
}

// PlaceN returns the indexes in addrs of the n servers a new topic with n
// replicas goes to, best first: the servers in order of their rendezvous
// weight for the topic, so PlaceN(topic, addrs, 1) is Place's. Every
// caller given the same addresses, in any order, places a topic alike. n
// is capped at len(addrs).
func PlaceN(topic string, addrs []string, n int) []int {
	idx := make([]int, len(addrs))
	w := make([]uint64, len(addrs))
	for i, a := range addrs {
		idx[i], w[i] = i, placeWeight(a, topic)
	}
	slices.SortFunc(idx, func(a, b int) int {
		switch {
		case w[a] != w[b]:
			return cmp.Compare(w[b], w[a])
		default:
			return strings.Compare(addrs[a], addrs[b])
		}
	})
	return idx[:max(0, min(n, len(idx)))]
}

// placeWeight hashes address and topic with 64-bit FNV-1a (a zero byte
// between them, so no two pairs run together alike) and spreads the bits
// with the SplitMix64 finalizer, since FNV's high bits alone mix poorly
// for names that differ only at their end.
func placeWeight(addr, topic string) uint64 {
	const offset64, prime64 = 14695981039346656037, 1099511628211
	h := uint64(offset64)
	for i := 0; i < len(addr); i++ {
		h = (h ^ uint64(addr[i])) * prime64
	}
	h = (h ^ 0) * prime64
	for i := 0; i < len(topic); i++ {
		h = (h ^ uint64(topic[i])) * prime64
	}
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	h ^= h >> 31
	return h
}
